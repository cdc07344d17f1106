"""The text ``MCS --help`` prints: UM's MCS man page, in our words."""

MCS = """\
MCS - Monitoring Collector Service: statistics from the monitoring topic into a database (pyum)

Usage: MCS [options] configfile
       MCS --init-db PATH

Subscribes to UM's statistics topic (/29west/statistics unless the configuration says
otherwise) and writes every statistics message -- UM library statistics (contexts, sources,
receivers, event queues), Store, DRO and SRS daemon statistics -- to a connector:

  sqlite   (the default, as UM's) one row per message in the tables umsmonmsg, umpmonmsg,
           dromonmsg and srsmonmsg, the message as protobuf's canonical JSON.  The database
           must exist: create it with MCS --init-db PATH (UM's ummon_db.sql).
  parquet  (pyum) files under DIR/kind=K/date=YYYY-MM-DD/, the key columns flat, the message
           as a nested structure and its protobuf bytes; needs pyarrow (pip install
           'pyum[parquet]').  A file appears when it is closed: every 60 s or 100,000 rows.

Control messages, other format modules' payloads and messages that do not parse are counted,
not stored (the first bad one is logged; -V logs each).

Options:
  -h, --help            print this text, then exit
  -p, --property-keys   print the connector property keys, then exit
  -v, --validate        check configfile (and its properties file) and exit: 0 valid, 1 not
  -V, --verbose         log every message collected
  -x, --xsd             print the XSD configuration files are checked against, then exit
  --init-db PATH        (pyum) create the SQLite database UM's MCS expects, then exit
  --metrics=HOST:PORT   serve Prometheus metrics at http://HOST:PORT/metrics (pyum)
  --web-monitor=HOST:PORT
                        (pyum) a status page: counts per kind, the writer's queue, errors

configfile: root <um-mcs version="1.0"> with
  <daemon><log type="console|file" frequency size max-history compression>FILE</log>
          <pid-file>FILE</pid-file></daemon>
  <connector><type>sqlite|parquet</type><properties-file>FILE</properties-file></connector>
  <receiver-transport-opts><topic>T</topic> or <wildcard-topic>PCRE</wildcard-topic>
          <config-file>UM flat configuration for the monitoring receiver</config-file>
  </receiver-transport-opts>
The properties file (Java properties): sqlite_database_path=PATH, or parquet_directory=DIR.
Relative paths are relative to the file that names them.  UM's hdfs connector is not in pyum.

The daemon's process reads each message's header only; worker processes (one per processor
but one, at least one, at most four) decode and convert batches of up to 5,000 messages, handed over every quarter
second, and a thread writes them (one transaction per batch, in arrival order).  When the
workers or the disk fall behind, batches beyond 64 queued are dropped and counted.  A worker
that dies is logged, counted and replaced; the batch it was converting is counted as failed.

Exit status: 0 after SIGINT/SIGTERM (what was received is written first), 1 for a bad
configuration or connector (one line: file, line, element, what), or when conversion workers
died more than 5 times within 60 seconds (what was converted is written first), 2 for a bad
command line.
"""

MCSDS = """\
mcsds - MCS as a Windows service (pyum)

Usage: mcsds [options] [configfile]

Records the service's parameters in the registry, or runs as the service executable when
started by the Service Control Manager (the same collector as MCS).

Options:
  -h, --help                  print this text, then exit
  -l, --service-log=FILE      log of the service front itself
  -p, --process-log=FILE      where MCS's standard output and errors go
  -s, --service=REQUEST       install [cfg], remove, or config cfg
  -e, --event-log-level=LEVEL NONE, INFO, WARN (default) or ERROR
  -E, --env_var_file=FILE     environment variables the service reads at start
  -f, --flatdir               accepted (UM: jar files beside the executables)
  -U, --noenv_var_file        forget the -E file (not with -E)

The database must exist before the service starts (MCS --init-db PATH).  Stop the service with
the Service Control Manager.  Not available outside Windows.
"""
