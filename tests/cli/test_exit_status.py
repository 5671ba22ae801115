"""One exit-status convention in every command (docs/cli.md): 0 ok, 1 a finding or a failed check, 2 usage
or bad input; and a scan that could not read a file never says "All checks passed"."""

from __future__ import annotations

import pytest

from torch_fl.cli import main


@pytest.mark.parametrize("argv", [
    ["describe", "cdua"],                        # an unknown description (it exited 1)
    ["describe", "/nowhere/chip.toml"],          # a path that does not exist
    ["routes", "show", "--device", "emu:minimla"],
    ["scan", "/nowhere/train.py"],               # scan already exited 2
])
def test_bad_input_exits_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error" in err and "Traceback" not in err


def test_a_usage_error_exits_2(capsys):
    with pytest.raises(SystemExit) as info:  # argparse's own exit
        main(["doctor", "--bogus"])
    assert info.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "usage"), [
    (["cache", "verify", "nosuch"], "usage: torchfl cache verify"),
    (["doctor", "--format", "json"], "usage: torchfl doctor"),
    (["routes", "show", "--bogus"], "usage: torchfl routes show"),
])
def test_an_unknown_argument_gets_the_commands_own_usage(argv, usage, capsys):
    """Not the top level's `usage: torchfl [-h] ... COMMAND` (issue 42)."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and usage in err and f"{usage.removeprefix('usage: ')}: error: unrecognized" in err


def test_doctor_with_a_device_that_does_not_exist_exits_2_after_its_report(capsys):
    """Bad input, as every command's --device (issue 42: doctor exited 1); the report still says why."""
    assert main(["doctor", "--device", "nosuch"]) == 2
    out = capsys.readouterr().out
    assert "device 'nosuch' is neither a virtual id (accN) nor a torch device" in " ".join(out.split())


def test_a_description_that_does_not_load_exits_2(tmp_path, capsys):
    chip = tmp_path / "chip.toml"
    chip.write_text('schema = 1\nname = "chip"\ndevice_type = "chip"\ndispatch_key = "Nonsense"\n')
    assert main(["describe", str(chip)]) == 2
    assert f"{chip}:4: [dispatch_key] 'Nonsense' is not a backend dispatch key" in capsys.readouterr().err


def test_a_syntax_error_is_not_all_checks_passed(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nx = (\n")
    assert main(["scan", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "All checks passed" not in out
    assert out.endswith("Nothing was checked.\n1 file could not be scanned (E999/E902 above).\n")
    good = tmp_path / "good.py"
    good.write_text("import torch\n")
    assert main(["scan", str(bad), str(good)]) == 1
    out = capsys.readouterr().out
    assert "All checks passed" not in out
    assert out.endswith("No findings in the other 1 file, but not every file was checked.\n"
                        "1 file could not be scanned (E999/E902 above).\n")
    assert main(["scan", str(good)]) == 0
    assert capsys.readouterr().out == "All checks passed: 1 file, 1 line scanned.\n"
