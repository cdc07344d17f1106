"""tnwgd: the Dynamic Routing Option (DRO) daemon."""
