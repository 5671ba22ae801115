"""torch_fl.analysis.doctor: the facts, the diagnosis and the text, as one report the command prints."""

from __future__ import annotations

import json

from torch_fl.analysis import doctor
from torch_fl.cli import main


def test_examine_returns_the_report_the_command_prints(capsys):
    report = doctor.examine("cpu")
    assert report.healthy is (not report.problems) and report.data["device"]
    assert report.json()["problems"] == report.problems and report.json()["healthy"] is report.healthy
    assert main(["doctor", "--device", "cpu", "--json"]) == (0 if report.healthy else 1)
    printed = json.loads(capsys.readouterr().out)
    assert printed.keys() == report.json().keys() and printed["problems"] == report.problems
    assert main(["doctor", "--device", "cpu"]) == (0 if report.healthy else 1)
    text = capsys.readouterr().out.splitlines()  # the same rendering (timings aside: a second self-check)
    assert text[0] == report.text().splitlines()[0] and text[-1] == report.text().splitlines()[-1]
