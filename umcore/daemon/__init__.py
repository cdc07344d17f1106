"""umcore.daemon: the runtime every pyum daemon (lbmrd, SRS, store, DRO) is built from.

- ``cli``         argparse with the seed's flags, ``--help`` printing the man page, ``--metrics``
- ``logs``        console or file logging with timestamps and levels, SIGHUP re-opening, and a
                  rate-limited logger for "malformed datagram" style messages
- ``logroll``     the ``<log type="file">`` handler: rolls by size and/or time, bounded history
- ``pidfile``     write the pid file at start, remove it at exit
- ``lifecycle``   the event loop (uvloop when installed), SIGTERM/SIGINT graceful stop (a second
                  SIGINT forces), SIGHUP, the Windows fallback; "validate config, else one line and
                  exit 1" before anything binds
- ``metrics``     the ``--metrics HOST:PORT`` Prometheus endpoint, one registry per daemon
- ``web``         the debug web pages: a daemon registers pages (data + blocks), the runner serves
                  each as HTML at ``/P`` and as its JSON twin at ``/json/P`` (aiohttp in the loop)
- ``statspub``    the ``<daemon-monitor>`` statistics publisher: per-category scheduling, pb/json
                  framing, bounded event queue, control requests, the UM source (or
                  ``--monitor-file``); a daemon supplies only its categories' content
- ``interfaces``  interface specifications (IP, CIDR, device name, host name) -> a local address
- ``winservice``  the Windows service front base class (pywin32, optional extra ``windows``)

A daemon's ``__main__`` is thin: parse the command line, load and check the configuration (exit 1
with one line on error; ``-v`` is :func:`~umcore.daemon.lifecycle.validate_and_exit`), open its log
(:func:`~umcore.daemon.lifecycle.open_log_or_exit`), then
:func:`~umcore.daemon.lifecycle.run_and_exit` its ``async`` body.  Its Windows service front
parses its own flags and hands them to :func:`~umcore.daemon.winservice.service_command`.
"""
