"""The commands of docs/tutorial.md (sections 6 to 10) that test_user_project.py runs as
written, through bash in the user's project directory; tests/unit/test_tutorial.py
checks that the page shows each one verbatim."""

JAR = "jar=$(venv/bin/elastorm jar | tail -1)   # your src/ and elastorm, for the workers"
SUBMIT = """LEIN_ROOT=1 venv/bin/sparse submit -e cluster -n wordcount -N wordcount -j "$jar" -f \\
    -o elastorm.sinks.sqlite_path=$PWD/counts.sqlite"""
STATUS = "venv/bin/elastorm status --topology wordcount"
CONTROLLER = (
    "venv/bin/elastorm migrate --topology wordcount --operator counts --status --timeout 120"
)
MIGRATE = (
    "venv/bin/elastorm migrate --topology wordcount --operator counts --group {group} "
    "--to holder --protocol {protocol}"
)
MIGRATIONS = tuple(
    MIGRATE.format(group=g, protocol=p) for g, p in enumerate(("direct", "cpa", "cpal"))
)
KILL = "kill -9 $(venv/bin/elastorm status --topology wordcount --pid counts)"
SETTLE = "sleep 20"
AFTER_KILL = MIGRATE.format(group=3, protocol="cpal") + " --timeout 120"
STATE = "venv/bin/elastorm state --topology wordcount --operator counts --key storm"
STOP = "LEIN_ROOT=1 venv/bin/sparse kill -e cluster -n wordcount"

ALL = (JAR, SUBMIT, STATUS, CONTROLLER, *MIGRATIONS, KILL, SETTLE, AFTER_KILL, STATE, STOP)
