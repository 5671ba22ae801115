"""Every string value of a description is checked by form (issue 42 item 4): the nonsense values the issue
found accepted, and a fuzz over every string key with its own seed corpus; a bad value is always a
DescriptionError naming the file, line and key, never a crash and never accepted."""

from __future__ import annotations

import random

import pytest

from torch_fl.description import loader
from torch_fl.description.schema import MAX_MESSAGE, MAX_TEXT, SCHEMA
from torch_fl.errors import DescriptionError

BASE = 'schema = 1\nname = "fuzzchip"\ndevice_type = "fuzz"\ndispatch_key = "PrivateUse1"\n'


def load(tmp_path, text: str):
    path = tmp_path / "chip.toml"
    path.write_text(text, encoding="utf-8")
    return loader.load(path)


@pytest.mark.parametrize("section, key, value, says", [
    ("compile", "backend", '"::"', "is not a torch.compile backend name"),
    ("compile", "backend", '"$HOME/x"', "is not a torch.compile backend name"),
    ("compile", "cache_dir", '"\\n"', "holds the control character '\\n'"),
    ("compat", "runtime", '" "', "is blank; write '' for none"),
    ("emulation", "plugin_migration", '["../../etc"]', "is not a Python module name"),
    (None, "vendor", '"' + "x" * 5000 + '"', "is 5000 characters long ('xxxx"),
])
def test_the_nonsense_values_the_issue_found_are_refused(tmp_path, section, key, value, says):
    text = BASE.replace('schema = 1\n', f'schema = 1\n{key} = {value}\n') if section is None else \
        BASE + f"[{section}]\n{key} = {value}\n"
    with pytest.raises(DescriptionError) as info:
        load(tmp_path, text)
    dotted = f"{section}.{key}" if section else key
    assert f"[{dotted}]" in str(info.value) and says in str(info.value)
    assert str(tmp_path / "chip.toml") in str(info.value)


def _string_keys() -> list[tuple[str | None, str]]:
    keys = []
    for section, table in SCHEMA.items():
        if section is None or not isinstance(table, dict):
            continue
        for key, spec in table.items():
            if getattr(spec, "type", "") == "str" and not spec.allowed:
                keys.append((section, key))
    return keys


SEEDS = ["\x00", "\x1b[31m", "a\nb", "\t", " ", "   ", "\x7f", "x" * (MAX_TEXT + 1), "é" * (MAX_TEXT + 1),
         "y" * (MAX_MESSAGE + 1)]


def test_fuzz_every_free_text_key_refuses_control_characters_blanks_and_floods(tmp_path):
    rng = random.Random(42)  # the corpus: the seeds above, and each mutated by insertion into a plain word
    keys = _string_keys()
    assert len(keys) > 10
    for section, key in keys:
        for seed in SEEDS + [f"ok{s}ok" for s in rng.sample(SEEDS[:3], 2)]:
            limit = MAX_MESSAGE if key.endswith("message") else MAX_TEXT  # (a vendor's warning may be long)
            if seed.strip() and not any(ord(c) < 32 or ord(c) == 127 for c in seed) and len(seed) <= limit:
                continue
            escaped = "".join(f"\\u{ord(c):04x}" if ord(c) < 32 or ord(c) == 127 or c in '"\\' else c for c in seed)
            with pytest.raises(DescriptionError) as info:
                load(tmp_path, BASE + f'[{section}]\n{key} = "{escaped}"\n')
            assert f"[{section}.{key}]" in str(info.value) and "not valid TOML" not in str(info.value), \
                (section, key, seed)


def test_every_builtin_description_still_loads():
    from torch_fl.description import registry

    registry.reload()
    assert {"cpu", "cuda", "npu", "mlu", "musa", "xpu", "mps", "rocm", "minimal"} <= set(registry.descriptions())
