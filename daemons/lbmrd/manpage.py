"""The text ``lbmrd --help`` and ``lbmrds --help`` print: the seed's man pages, in our words."""

LBMRD = """\
lbmrd - unicast UDP topic resolution daemon (pyum)

Usage: lbmrd [options] [config-file]

Contexts that cannot use multicast send their topic resolution traffic (advertisements, queries
and keepalives) to lbmrd over unicast UDP; lbmrd forwards every advertisement and query it
receives to all the other contexts it has heard from, so they can find each other as if
multicast were available.  It keeps no topic state, only a table of clients.

Options:
  -a, --activity=IVL    check for dead clients every IVL milliseconds (default 60000)
  -d, --dump-dtd        print the DTD configuration files are checked against, then exit
  -h, --help            print this text, then exit
  -i, --interface=ADDR  receive on the interface ADDR, given as an IP address (10.1.1.50), a
                        CIDR network to match a local interface against (10.0.0.0/8), a device
                        name ("eth0"), or a host name (host.example.com or host.example.com/24)
  -L, --logfile=FILE    write the log to FILE instead of standard output
  -p, --port=PORT       receive on UDP port PORT (default 15380; 0 picks a free port, pyum only)
  -t, --ttl=TTL         forget a client heard nothing from for TTL seconds (default 60)
  -r, --rcv-buf=SIZE    ask for a SIZE-byte socket receive buffer (default 1048576)
  -s, --snd-buf=SIZE    ask for a SIZE-byte socket send buffer (default 1048576)
  -v, --validate        check config-file, print the first problem found, then exit
  --pid-file=FILE       write the process id to FILE once listening; removed at exit (pyum)
  --max-clients=N       keep at most N clients in the table (default 4096; pyum)
  --metrics=HOST:PORT   serve Prometheus metrics at http://HOST:PORT/metrics (pyum; off by
                        default)
  --web-monitor=HOST:PORT
                        serve web pages (clients, rates, NAT domains) at http://HOST:PORT/
                        (pyum; off by default)

config-file is optional: without one every setting has its default.  Its format is described
by the DTD (-d): <lbmrd version="1.0"> holding an optional <daemon> with the same settings as
the options above (<ttl> there is in MILLISECONDS), then <domains> and <transformations>, which
are required even without NAT (use the one-domain "dummy" configuration).  A setting given on
the command line overrides the same setting in the file.

Interface: name one.  Without -i or <interface>, lbmrd does not listen on all interfaces: like
UM's lbmrd it takes the FIRST interface it finds, often the loopback, and warns about it.

Dead clients: a client is removed once nothing (advertisement, query or keepalive) was received
from it for TTL seconds; the check runs every IVL milliseconds.  Choose a TTL at least 5 seconds
longer than the longest network outage to be tolerated, and IVL no larger than TTL*1000.
Contexts send keepalives when they have nothing else to send (every 500 ms by default), and
lbmrd answers each one and keeps every client it has not sent anything to for 500 ms informed
with keepalives of its own, since a context considers an lbmrd dead after 1 s of silence.

NAT: with <domains> and <transformations>, the transport addresses inside advertisements sent
from one domain to clients in another are rewritten by the matching <rule>s (see configs/
lbmrd-nat.xml).  Everything lbmrd sends leaves from its listening address and port.

Malformed or non-resolution datagrams are counted and dropped (logged, rate-limited).

Client table (pyum): at most --max-clients clients (4096 by default: every datagram is copied to
every client, and the bound keeps a flood of spoofed senders from growing memory).  While it is
full, datagrams from a new client are dropped and the client gets no keepalive answers, so it
sees this lbmrd as inactive (the LBMR protocol has no refusal message).  Each refusal kind has its
own log line: the first refusal at once, naming the client, then one summary per 10 s with the
count, the number of clients refused and a few of their addresses.
SIGTERM or SIGINT stops lbmrd cleanly (a second SIGINT forces it); SIGHUP re-opens the log file.

Exit status: 0 on success (and for -v on a valid file); 1 when a file is wrong or lbmrd cannot
start: the configuration (one line: file:line: element: problem), a -L log or --pid-file that
cannot be written, the port in use; 2 for a wrong command line: an unknown option, a missing or
out-of-range value (-p 70000, -v without a config-file, -i naming no interface of this host).
"""

LBMRDS = """\
lbmrds - unicast UDP topic resolution daemon as a Windows service (pyum)

Usage: lbmrds [options] [config-file]

Options:
  -h, --help                   print this text, then exit
  -E, --env-var-file=FILE      record FILE as the service's environment variable file
  -U, --unset-env-var-file     forget the environment variable file
  -S, --service=install        install the service (with config-file, if given)
  -S, --service=remove         remove the service
  -S, --service=config         record config-file as the service's configuration file
  -e, --event-log-level=LEVEL  lowest level sent to the Windows event log: NONE, INFO,
                               WARN (default) or ERROR

config-file: the XML configuration file; without one the service uses the file recorded in the
registry.  The service takes its settings from that file only (-p, -t, -r ... do not exist here:
use the <daemon> elements).  Stop the service from the service control panel, not by killing it.

Needs pywin32 (pip install "pyum[windows]"); on other systems run lbmrd under systemd instead.
Exit status: 0 on success, non-zero on failure.
"""
