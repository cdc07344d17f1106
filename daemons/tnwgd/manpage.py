"""The text ``tnwgd --help`` and ``tnwgds --help`` print: UM's man pages (notes A11), in our words."""

TNWGD = """\
tnwgd - the Dynamic Routing Option (DRO) daemon, joining topic resolution domains (pyum)

Usage: tnwgd [options] configfile

A DRO joins topic resolution domains (TRDs) that cannot reach each other directly.  Each
<endpoint> portal of configfile is a pair of UM contexts (receiver and source) in one TRD,
resolving topics by multicast, lbmrd or the SRS as its <lbm-config>/<lbm-attributes> say, and
named by its <domain-id>.  The DRO learns which topics and wildcard patterns receivers want in
each domain, creates proxy receivers where the sources are and proxy sources where the receivers
are, and forwards the messages between them (fragments as they are, with their sequence
numbers); late join and OTR are answered by the originating source, never by the DRO.

Options:
  -d, --dump-dtd        print the DTD configfile is checked against, then exit
  -f, --detach          start in the background: the command returns once the configuration
                        is checked and the log is open (not on Windows)
  -h, --help            print this text, then exit
  -u, --use-utc         log timestamps in UTC instead of local time
  -v, --validate        check configfile against the DTD, print "<file>: valid" and exit 0, or
                        the first problem with its line and exit 1 (structure only)
  --metrics=HOST:PORT   serve Prometheus metrics at http://HOST:PORT/metrics (pyum; off by
                        default): per portal (label "portal") the DROMonMsg figures below as
                        pyum_dro_portal_*, pyum_dro_endpoint_receive_*, pyum_dro_endpoint_send_*
                        (frames received, forwarded, sent, dropped as duplicates or because
                        the portal's queue was full, bytes enqueued / maximum / limit), the
                        interest and proxy counts, pyum_dro_portal_up, the core's own counters
                        (pyum_dro_portal_core_*: ACL rejections, hop-limit drops, unknown
                        sources ...), and pyum_dro_local_* for the topology

Statistics: <monitor interval="N"> with <transport-module module="lbm" options="..."/> and
<format-module module="pb"/> publishes every N seconds on the monitoring topic (default
/29west/statistics; options config=FILE;topic=NAME;context|option=value configure the
monitoring context 29west_statistics_context):
  - DROMonMsg daemon statistics (dro_mon.proto), application id <daemon><name>: the first
    message carries the configuration (the whole file, and each portal's name, index and type)
    with the statistics, later ones the statistics only: per portal its cost, proxy receivers
    and sources, interest (local, remote, propagated), receive and send counters and queue
    bytes, and the other DROs heard with their links;
  - the portal contexts' UM library statistics, application ids
    Gateway_Portal_<portal>_rcv_ctx and Gateway_Portal_<portal>_src_ctx (monitor_appid is
    ignored, as UM's DRO does).
  lbmmon and MCS read both.  Only the lbm transport module and the pb format are implemented:
  any other (the csv format is UM's default) is refused at start with one line.  The
  deprecated <daemon-monitor> binary statistics and its control requests are accepted in the
  file and not published.  Figures pyum's DRO does not count (immediate messages, requests,
  control messages, forwarded/sent bytes, recalculation times, peer link batching and RTT)
  stay 0.

Web monitor: <web-monitor>iface:port</web-monitor> (* = every interface; port 0 a free one,
logged as "DRO web monitor on http://HOST:PORT/") serves read-only pages, each also as JSON
under /json: / (main), /config (the configuration file), /portals and /portals/NAME (interest,
proxy receivers and sources, receive and send statistics, enqueued bytes), /topology (this
DRO, its portals, the other DROs and their links), /path (shortest paths between known
domains; /path/D1/D2 for one pair: hop count, aggregate cost, the DROs and TRDs in order) and
/malloc (glibc's allocator figures).  Each page is sampled at most once a second.  No
security, as UM's: firewall the port.

Log: <log type="console|file|syslog"> (console when absent).  Lines read "[YYYY-MM-DD
HH:MM:SS.uuuuuu] [severity] text" with UM's message ids where known (Gwd-7136-1 version,
Gwd-7122-1 started).  Files are appended to and rolled by frequency and size, never deleted.
<pidfile> is written once the portals run and removed at exit.

Signals: SIGINT or SIGTERM stop the DRO cleanly (exit status 0); SIGHUP re-opens the log file.

Exit status: 0 after a clean stop; 1 for a bad configuration file (or one UM does not support:
two endpoints with one <domain-id>, or two endpoints in one topic resolution domain; a
<monitor> with a transport or format module pyum does not implement; a malformed
<web-monitor>), a log or pid file that cannot be written, or a portal that cannot start; 2 for
a bad command line.
"""

TNWGDS = """\
tnwgds - the DRO as a Windows service (pyum)

Usage: tnwgds [options] [configfile]

Records the service's parameters in the registry, or runs as the service executable when
started by the Service Control Manager (the same DRO as tnwgd).

Options:
  -d, --dump-dtd               print the DTD configuration files are checked against, then exit
  -h, --help                   print this text, then exit
  -v, --validate               check configfile, then exit (0 valid, 1 not)
  -u, --use-utc                log timestamps in UTC
  -s, --service=REQUEST        install [configfile], remove, or config configfile
  -e, --event-log-level=LEVEL  NONE, INFO, WARN (default) or ERROR: the lowest level sent to
                               the Windows event log
  -E, --env_var_file=FILE      environment variables the service reads at start
  -U, --unset-env-var-file     forget the -E file (not with -E)

Use fully qualified paths.  Stop the service from the service control panel, not by killing
it.  Needs pywin32 (pip install "pyum[windows]"); on other systems run tnwgd under systemd.
Exit status: 0 on success, non-zero on failure.
"""
