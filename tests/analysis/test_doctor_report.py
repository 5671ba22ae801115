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


def test_the_text_is_the_report_models_rendering():
    from torch_fl.report import render_text

    report = doctor.examine("cpu")
    model = report.report()
    assert model.data == report.json()  # what --json prints
    assert render_text(model) == report.text()
    titles = [section.title for section in model.sections]
    assert titles[:2] == ["Versions", "Device"] and titles[-1] == "Result"
    assert ("torch", report.data["torch_version"]) in model.sections[0].fields


def test_fields_share_one_column_across_sections():
    from torch_fl.report import Report, Section, render_text

    text = render_text(Report("t", {}, sections=[Section("a", fields=[("k", "1")]),
                                                 Section("b", text=["note"], fields=[("longer key", "2")])]))
    assert "\nk:          1\n" in text and "\nnote\nlonger key: 2\n" in text


def test_problems_and_warnings_are_numbered_in_the_report():
    data = doctor.collect("cpu")
    text = doctor.render_doctor_text(data, ["first problem. Next step: fix it.", "second."], ["a caution"])
    assert "\nWarnings\n--------\n  1. a caution\n" in text
    assert text.endswith("\nResult\n------\n2 problems:\n  1. first problem. Next step: fix it.\n  2. second.\n")
