"""The text ``umestored --help`` and ``umestoreds --help`` print: the seed's man pages, in our words."""

UMESTORED = """\
umestored - the Ultra Messaging persistent store daemon (pyum)

Usage: umestored [options] CONFIG.xml

A Store keeps the messages of persisted sources (sources configured with ume_store or
ume_store_name) in repositories, in memory or on disk, acknowledges them to the source once
they are stable, and hands them back to receivers that recover after a restart or a loss.
CONFIG.xml (root <ume-store>, checked against the DTD that -d prints) describes the process
(<daemon>) and one or more Store instances (<store>), each with its own name, request port,
directories and topic patterns.

Options:
  -h, --help            print this text, then exit
  -d, --dump-dtd        print the DTD configuration files are checked against, then exit
  -v, --validate        check CONFIG.xml against the DTD and the option tables, print the first
                        problem found with its line, exit 0 when valid and 1 otherwise
  -f, --detach          start in the background: the command returns once the configuration
                        is checked (not on Windows)
  -u, --use-utc         log timestamps in UTC instead of local time
  -a, --affinitize=PCPU[,RRLIST]
                        CPU pinning.  UM pins its threads (PCPU: miscellaneous threads, then
                        four threads per Store in turn from RRLIST); the pyum Store is one
                        asyncio thread plus one disk writer thread per Store, so the whole
                        process is pinned to PCPU and RRLIST is accepted, checked and logged
                        as not applied.  Needs os.sched_setaffinity (Linux).
  --metrics=HOST:PORT   serve Prometheus metrics at http://HOST:PORT/metrics (pyum; off by
                        default): per Store, its sources, receivers, messages stored and
                        acknowledged, repository bytes, disk writes and their errors.
  --web-monitor-get-reset
                        the web monitor's Reset Rate Stats also by GET, as UM's link (default:
                        a POST only: a crawler following links must not reset the rates).

Start-up: every Store's disk-cache-directory and disk-state-directory (defaults
umestored-cache and umestored-state, relative to the working directory) must already exist,
for memory repositories too; the Store does not create them and refuses to start without them
(one line naming the file and the option, exit 1).  Repositories and state files found there
are read back before anything listens, so sources and receivers re-register where they were;
repaired or skipped records are logged.  Each Store then listens on <store interface port>
(interface: an address or a CIDR network matching a local interface; port 0 picks a free port
of request_tcp_port_low..high) and logs "ready to accept registrations".

UM options for the Stores' contexts: <lbm-config> (a flat file; errors in it are logged as
warnings and the Store goes on, as UM's since 6.13), <xml-config application-name=...> (an
XML configuration file), then each Store's <option type="lbm-context"> entries, then for the
receivers of matching topics each <topic>'s <option type="lbm-receiver">.  Unless configured
otherwise a Store's receivers are given use_otr 1 and delivery_control_maximum_burst_loss
4294967295 (Informatica's advice: a Store repairs its own loss).  pyum's Store receives through
the engine's raw receivers, which do not run OTR yet: on TCP nothing is lost; on LBT-RU and
LBT-RM the transport's own NAK repair is what a Store has for now.

Web monitor: <web-monitor>Address:Port</web-monitor> (* = every interface, port 0 a free one,
logged as "store web monitor on http://HOST:PORT/") serves UM's pages at UM's paths: /,
/stores, /stores/N, /stores/N/REGID (a source or a receiver), each also as JSON under /json;
the rate reset is a POST to /stores/N/reset-rate-stats.  No security, as UM's: firewall it.
The pages are served by a child process (niced; it exits with the daemon) that asks the Stores
only for each page's data, at most once a second per page (in-process on Windows).

Not in pyum: <daemon-monitor>'s deprecated binary statistics are accepted and reported as not
running (use --metrics).

Log: <log> (console by default; type="file" appends to the file and rolls it by frequency
and size, never deleting old files).  Lines read "Www Mmm dd hh:mm:ss yyyy [LEVEL]: store:
text".  <pidfile> is written once every Store listens and removed at exit.

Signals: SIGINT or SIGTERM stop the Store cleanly: registrations stop, outstanding disk writes
and the state files are finished ("Shutdown requested" ... "Shutdown complete"), exit status
0.  A second SIGINT exits at once (status 130) without finishing them: not recommended.
SIGHUP re-opens the log file.  Give a service manager enough stop time for the writes to
finish (the systemd unit allows 120 s).

Exit status: 0 success (and for -v on a valid file); 1 a configuration or start-up error (one
line: file:line: element: problem; a <log> or <pidfile> that cannot be written, a port in use);
2 a usage error (an unknown option, no CONFIG.xml, a missing or out-of-range value such as -a
naming a CPU this machine does not have).
"""

UMESTOREDS = """\
umestoreds - the persistent store as a Windows service (pyum)

Usage: umestoreds [options] [CONFIG.xml]

Records the service's parameters in the registry, or runs as the service executable when
started by the Service Control Manager.

Options:
  -h, --help                   print this text, then exit
  -d, --dump-dtd               print the DTD configuration files are checked against, then exit
  -v, --validate               check CONFIG.xml, then exit (0 valid, 1 not)
  -u, --use-utc                log timestamps in UTC
  -a, --affinitize=PCPU[,RRLIST]
                               accepted as by umestored
  -s, --service=REQUEST        install [CONFIG.xml], remove, or config CONFIG.xml
  -e, --event-log-level=LEVEL  NONE, INFO, WARN (default) or ERROR
  -E, --env_var_file=FILE      environment variables the service reads at start
  -U, --unset_env_var_file     forget the -E file (not with -E)

Use fully qualified paths and local disks.  Stop the service from the service control panel,
not by killing it: the Store finishes its disk writes first.  Needs pywin32 (pip install
"pyum[windows]"); on other systems run umestored under systemd instead.
Exit status: 0 on success, non-zero on failure.
"""
