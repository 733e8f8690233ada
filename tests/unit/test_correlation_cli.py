"""``elastorm correlate``: argument parsing and user errors, no Spark started."""

from __future__ import annotations

import pytest

from elastorm.errors import UserError
from elastorm.jobs.correlation import JobConfig, OperatorInput, parse_input_spec
from elastorm.runtime.cli import build_parser, main


def test_spec_parsing_with_defaults():
    op = parse_input_spec("name=op1,path=/d/f.csv,groups=48,key=tailnum,ts=time_hour")
    assert (op.name, op.path, op.num_key_groups, op.key_column, op.ts_column) == (
        "op1",
        "/d/f.csv",
        48,
        "tailnum",
        "time_hour",
    )
    assert op.resolved_format == "csv" and op.weight_column is None
    log = parse_input_spec("name=op4,path=/logs/op4,groups=8,format=tuplelog")
    assert (log.key_column, log.ts_column, log.weight_column) == ("key", "ts", "weight")
    assert log.resolved_format == "parquet"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("name=a,path=x", "lacks groups="),
        ("name=a,path=x,groups=many", "groups must be an integer"),
        ("name=a,path=x,groups=0", "groups must be >= 1"),
        ("name=a,path=x,groups=2,colour=red", "unknown input spec field 'colour'"),
        ("name=a,path=x,groups=2,format=xls", "format must be one of"),
        ("oops", "not key=value"),
    ],
)
def test_bad_specs_are_user_errors(spec, message):
    with pytest.raises(UserError, match=message):
        parse_input_spec(spec)


def test_zip_input_is_refused_with_a_hint():
    op = OperatorInput(name="a", path="flights.csv.zip", num_key_groups=2)
    with pytest.raises(UserError, match="unzip"):
        _ = op.resolved_format


def test_config_checks():
    op = OperatorInput(name="a", path="x.csv", num_key_groups=2)
    with pytest.raises(UserError, match="--window"):
        JobConfig(inputs=(op,), window_seconds=0)
    with pytest.raises(UserError, match="unique"):
        JobConfig(inputs=(op, op), window_seconds=60)
    with pytest.raises(UserError, match="--end must be after"):
        JobConfig(inputs=(op,), window_seconds=60, time_start=10, time_end=5)


def test_subcommand_is_registered_with_help(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["correlate", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--window" in out and "--input" in out and "tuplelog" in out


def test_user_error_is_one_line_exit_2(capsys, tmp_path):
    code = main(
        [
            "correlate",
            "-i",
            "name=a,path=x.csv,groups=2",
            "--window",
            "60",
            "-o",
            "/no/such/d/o.npz",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err == "elastorm correlate: error: output directory /no/such/d does not exist"
