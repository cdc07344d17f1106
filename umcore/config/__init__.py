"""umcore.config: UM options and configuration files.

- ``options``    the option registry: every option of every scope, typed, with its default
- ``values``     value types: integers with ranges, 0/1 flags, enumerations, addresses, interfaces,
                 list options (``resolver_unicast_daemon``, ``resolver_service``, ``ume_store``...)
- ``flatfile``   plain-text ``scope option value`` files
- ``umxml``      ``um.xml``: templates, applications, contexts, topics, restrictions
- ``attributes`` attribute objects and the process configuration (UM's precedence rules)
- ``srs``, ``store``, ``dro``  the daemons' XML files, validated and typed (lbmrd: ``lbmrd``)
- ``xmlfile``    loading a daemon's XML file and validating it against the DTD or XSD it ships,
                 with errors that name file, line and element
- ``schemas/``   the DTDs and XSDs our daemons ship (printed by ``lbmrd -d``, ``SRS -x``, …)
"""
