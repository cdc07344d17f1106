"""umcore.config: UM options and configuration files.

- ``xmlfile``  loading a daemon's XML file and validating it against the DTD or XSD it ships,
               with errors that name file, line and element
- ``schemas/`` the DTDs and XSDs our daemons ship (printed by ``lbmrd -d``, ``SRS -x``, …)
"""
