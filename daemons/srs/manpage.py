"""The text ``SRS --help`` and ``srsds --help`` print: the seed's man pages, in our words."""

SRS = """\
SRS - Stateful Resolver Service, TCP-based topic resolution daemon (pyum)

Usage: SRS [options] [configfile]

Contexts configured with resolver_service connect to the SRS over TCP instead of multicasting
topic resolution.  Each context tells the SRS about its sources and about the topics (and
wildcard patterns) it receives; the SRS tells every context about the sources it is interested
in, keeps that state while a context is briefly disconnected (the state lifetimes), and tells
receivers when a source ends.  Several SRSes can serve one topic resolution domain: contexts use
all of them.

Options:
  -d, --dump            print the full effective configuration (defaults filled in) as XML,
                        then exit
  -D, --Debug=PATH:MASK support debugging output (accepted; pyum logs at DEBUG level)
  -h, --help            print this text, then exit
  -j, --java            print run-time platform information to the log (repeat for more)
  -v, --validate        check configfile against the XSD, print the first problem found with
                        its line, exit 0 when valid and 1 otherwise
  -x, --xsd             print the XSD configuration files are checked against, then exit
  --metrics=HOST:PORT   serve Prometheus metrics at http://HOST:PORT/metrics (pyum; off by
                        default)

configfile is optional: without one every setting has its default (listen on localhost:27000).
Its root element is <um-srs>; SRS -x prints the rules and SRS -d the effective values.

What pyum does with the internal elements:
  <debug-monitor>       with <enabled>true</enabled>, a read-only support page at
                        http://interface:port/ (default localhost:27001) and the same data as
                        JSON at /json: version, uptime, counters, connected clients, topics
                        (lists capped at 200 entries, "N more").  The page reloads every
                        ping-interval.  Port 0 picks a free port (pyum); the log line
                        "debug monitor on http://HOST:PORT/" gives it.
  <clientactor>         honoured: records for a client are queued and sent every
                        record-queue-service-interval ms (a full frame leaves at once), in
                        frames of at most batch-frame-max-record-count records and
                        batch-frame-max-datagram-size bytes; request-stream-max-msg-count
                        bounds the frames sent to one client per service (pyum's reading),
                        and the client's RSocket request_n credit is respected.
  <otidmap>, <topicmap>, <routemap>, <namemap> <shards>
                        accepted and reported (INTERNAL_CONFIG_OPTS), but without effect:
                        shards partition UM's maps between threads; the pyum SRS is a single
                        asyncio thread and keeps one map of each kind.
  <pyum-limits>         a pyum extension (not in UM's schema): max-connections, max-clients,
                        max-sources, max-sources-per-client, max-sources-per-host,
                        max-buffered-bytes (bytes of incomplete frames, all connections),
                        frame-timeout, registration-timeout and max-silence (ms; caps the
                        max lifetime a client's SETUP asks).  SRS -d prints the defaults.
                        Refusals are logged one rate-limited line per kind ("refused ...").

Signals: SIGINT or SIGTERM stop the SRS cleanly (exit status 0); a second SIGINT forces an
immediate exit.  SIGHUP re-opens the log file.

Exit status: 0 success; 1 a configuration or start-up error (one line: file:line: element:
problem; a <log> or <pid-file> that cannot be written, the port in use); 2 a usage error (an
unknown option, a missing or out-of-range value, -v without a configfile).
"""

SRSDS = """\
srsds - the SRS as a Windows service (pyum)

Usage: srsds [options] srs_cfgfile_name

Records the service's parameters in the registry, or runs as the service executable when
started by the Service Control Manager.

Options:
  -h, --help                  print this text, then exit
  -l, --service-log=FILE      log of the service front itself (written when the SRS fails to
                              start)
  -p, --process-log=FILE      where the SRS's standard output and errors go
  -s, --service=REQUEST       install [cfg], remove, or config cfg
  -e, --event-log-level=LEVEL NONE, INFO, WARN (default) or ERROR
  -E, --env_var_file=FILE     environment variables the service reads at start
  -f, --flatdir               accepted (UM: jar files beside the executables)
  -U, --noenv_var_file        forget the -E file (not with -E)

The service log, the process log and the SRS's own <log> must be three different files.
Stop the service with the Service Control Manager.  Not available outside Windows.
"""
