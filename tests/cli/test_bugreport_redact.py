"""bugreport redacts by value shape as well as by name, anonymises home and user, and always reports."""

from __future__ import annotations

import pytest

import torch_fl
from torch_fl.analysis import doctor
from torch_fl.cli import bugreport, main

HOME, USER = "/home/alice", "alice"


def _r(text: str) -> str:
    return bugreport.redact(text, environ={}, home=HOME, user=USER)


@pytest.mark.parametrize(("text", "secret", "kept"), [
    ("db postgres://bob:pa55word@db.internal:5432/app", "pa55word", "postgres://<redacted>@db.internal:5432/app"),
    ("mysql://bob:pa55word@host", "bob:", "mysql://<redacted>@host"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.abc", "eyJhbGci", "Authorization: Bearer <redacted>"),
    ('-H "Authorization: token abcdef123456"', "abcdef123456", "Authorization: token <redacted>"),
    ("sending bearer abcdefghijklmnop now", "abcdefghijklmnop", "bearer <redacted> now"),
    ("token ghp_0123456789abcdefghij0123456789abcd", "ghp_0123", "token <redacted>"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "github_pat_", "<redacted>"),
    ("HF hf_abcdefghijklmnopqrstuv", "hf_abcdefghij", "HF <redacted>"),
    ("key sk-proj-abcdefghijklmnopqrstuvwx", "sk-proj", "key <redacted>"),
    ("aws AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE", "aws <redacted>"),
    ('{"password": "hunter2", "user": "x"}', "hunter2", '{"password": <redacted>, "user": "x"}'),
    ('{"api_key":"zzz-top"}', "zzz-top", '{"api_key":<redacted>}'),
    ("db_password: hunter3", "hunter3", "db_password: <redacted>"),
    ("client_secret = 'abc123'", "abc123", "client_secret = <redacted>"),
    ("python train.py --password hunter4 --lr 0.1", "hunter4", "--password <redacted> --lr 0.1"),
    ("python train.py --api-key=xyz987 --lr 0.1", "xyz987", "--api-key=<redacted> --lr 0.1"),
    ("login(hf_token='abcd1234')", "abcd1234", "hf_token=<redacted>"),
    ('{"accessToken": "tok-123456"}', "tok-123456", '"accessToken": <redacted>'),
    ("WANDB_API_KEY=0123456789abcdef", "0123456789abcdef", "WANDB_API_KEY=<redacted>"),
])
def test_secrets_are_redacted_by_value_shape(text, secret, kept):
    out = _r(text)
    assert secret not in out and kept in out, out


@pytest.mark.parametrize("text", [
    "scikit-learn sk-learn", "https://example.com/path@v1", "--lr 0.1 --batch-size 32",
    "the token count is 42", "RuntimeError: CUDA error: device-side assert",
    # traceback lines of real ML code (pytorch/examples, nanoGPT, timm) that a name-only rule mangled
    "results = sorted(results, key=lambda x: x[sort_key], reverse=True)", "class_token=False, global_pool='avg'",
    "self.cls_token = nn.Parameter(torch.zeros(1, embed_dim))", "src_tokenizer = get_tokenizer('spacy', lang)",
    "python sample.py --num_samples=5 --max_new_tokens=100", "input_key=args.input_key,",
    "flops_per_token = 6*N + 12*L*H*Q*T", "token: ${{ secrets.GITHUB_TOKEN }}", "id-token: write",
])
def test_ordinary_text_is_left_alone(text):
    assert _r(text) == text


def test_home_is_tilde_and_user_is_a_placeholder():
    out = _r(f'File "{HOME}/proj/train.py", line 3, run by alice on alice@gpu-01; alicen stays')
    assert out == 'File "~/proj/train.py", line 3, run by <user> on <user>@gpu-01; alicen stays'


def test_generic_user_names_are_replaced_only_where_they_are_the_account():
    out = bugreport.redact("/root/x and /srv/root/y, root@host, the root of the tree", environ={},
                           home="/root", user="root")
    assert out == "~/x and /srv/<user>/y, <user>@host, the root of the tree"


def test_report_has_no_home_or_user(capsys, monkeypatch, tmp_path):
    home = tmp_path / "home" / "carol"
    home.mkdir(parents=True)
    log = home / "err.log"
    log.write_text(f"Traceback in {home}/train.py\nuser carol ran python x.py --password s3cr3tpw\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USER", "carol")
    assert main(["bugreport", "--log", str(log)]) == 0
    out = capsys.readouterr().out
    assert str(home) not in out and "carol" not in out and "s3cr3tpw" not in out
    assert "~/train.py" in out and "user <user> ran" in out


@pytest.mark.parametrize(("name", "value", "problem"), [
    ("FL_DEVICE", "nosuch", "device 'nosuch' (from FL_DEVICE)"),
    ("FL_DEVICE", "emu:nosuch", "no device description named 'nosuch'"),
    ("FL_CACHE_KEEP", "abc", "FL_CACHE_KEEP: 'abc' is not a whole number >= 1"),
    ("FL_BACKEND", "nosuch", "nosuch"),
])
def test_always_a_report_listing_the_problems(name, value, problem, capsys, monkeypatch):
    monkeypatch.setenv(name, value)
    torch_fl.reset()
    assert main(["bugreport"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# torch-fl bug report")
    section = out.split("**Problems found by `torchfl doctor`:**", 1)[1]
    assert "1. " in section and problem in section


def test_report_even_when_doctor_itself_fails(capsys, monkeypatch):
    def broken(device=None):
        raise RuntimeError("doctor broke")

    monkeypatch.setattr(doctor, "collect", broken)
    assert main(["bugreport"]) == 0
    out = capsys.readouterr().out
    assert "1. doctor broke" in out
