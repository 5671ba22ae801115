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


# gitleaks' rule examples: the judge of issue 31 ------------------------------------------------------
def _judge():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "redact_leak_rate.py"
    spec = importlib.util.spec_from_file_location("redact_leak_rate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fixture_holds_gitleaks_examples_with_attribution():
    judge = _judge()
    header = judge.FIXTURE.read_text(encoding="utf-8").split("\n[", 1)[0]
    assert "gitleaks" in header and "MIT" in header and "Zachary Rice" in header
    rows = judge.load()
    assert len(rows) >= 300 and len({rule for rule, _, _ in rows}) >= 200
    assert len(judge.SHAPES) >= 10


def test_the_fixture_is_what_the_generator_extracts_from_a_gitleaks_checkout():
    import os
    from pathlib import Path

    repo = os.environ.get("GITLEAKS_REPO", "/work/.mirror/gitleaks+gitleaks/repo")
    if not Path(repo).exists():
        pytest.skip("no gitleaks checkout (fetch github:gitleaks/gitleaks, or set GITLEAKS_REPO)")
    judge = _judge()
    fresh = judge.load(repo)
    assert fresh == judge.load() or len(fresh) >= 300  # a newer gitleaks may add rules; it still extracts


@pytest.mark.parametrize("detector", [True, False], ids=["detect-secrets", "floor"])
def test_at_most_one_percent_of_gitleaks_examples_leak_in_the_shapes_people_paste(detector):
    judge = _judge()
    rows = judge.load()
    leaks = judge.measure(lambda text: bugreport.redact(text, environ={}, home=HOME, user=USER,
                                                          detector=detector), rows)
    count, total = sum(len(v) for v in leaks.values()), len(rows) * len(judge.SHAPES)
    assert count <= total / 100, f"{count} of {total} leak: " + "; ".join(
        f"{shape}: {rule}" for shape, found in leaks.items() for rule, _, _ in found[:3])
    assert leaks["said twice"] == []  # one value redacted everywhere


@pytest.mark.parametrize(("text", "secret"), [
    # GitLab's token kinds, Hugging Face org tokens, Slack app/config tokens, SendGrid, PyPI (issue 31)
    *[(f"token {prefix}-abcdefghij0123456789xy", "abcdefghij0123456789")
      for prefix in ("glpat", "gldt", "glffct", "glft", "glimt", "glagent", "gloas", "glrt", "glsoat", "glcbt")],
    ("glptt-0123456789abcdef0123456789abcdef01234567", "0123456789abcdef0123456789abcdef"),
    ("runner GR1348941abcdefghij0123456789", "abcdefghij0123456789"),
    ("HF api_org_abcdefghijklmnopqrstuvwxyzABCDEFGH", "abcdefghijklmnopqrstuvwxyz"),
    ("xapp-1-A052FGTS2DL-5171572773297-610b6a11f4b7eb819e87b767d80e6575", "610b6a11f4b7eb819e87b767d80e6575"),
    ("xoxe-1-My0xLTMxNzcwMjQ0MTcxMy01MTU4MTUyNjkxNzE0LTUx", "My0xLTMxNzcwMjQ0MTcxMy01"),
    ("key 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", "TwL2iGABf9DHoTf"),
    ("pypi-AgEIcHlwaS5vcmcCJGE4ZjY5ZjQ5LWFkYjItNGQ1Zi05ZTM3LTc0ZmQ1ZTM3ZjU5NwACKlsz", "CJGE4ZjY5ZjQ5"),
    ('DISCORD_CLIENT_SECRET = "91351681201983119784608212610413"', "91351681201983119784608212610413"),
    # the shapes: os.environ, header dicts, options, URL user and path, YAML, JSON, kwargs, a traceback
    ('os.environ["ADAFRUIT_TOKEN"] = "v_gzzlxo8lfand1iywylw8qf9s704mby"', "v_gzzlxo8lfand1iywylw8qf9s704mby"),
    ('headers = {"X-Algolia-Key": "24fa0de6495b5b1b15541a2510ce7d1f"}', "24fa0de6495b5b1b15541a2510ce7d1f"),
    ("python up.py --airtable-key d05r8a7etzqo5t209 --retries 3", "d05r8a7etzqo5t209"),
    ("git clone https://ghp_kvc6n6zztsacwr635fkg9pfflbv93exyabc0@github.com/a/b.git", "kvc6n6zztsacwr635fkg9pf"),
    ("git clone https://d05r8a7etzqo5t209x@example.com/a/b.git", "d05r8a7etzqo5t209x"),
    ("POST https://api.example.com/v1/hooks/7451k95eml4yz0eeds7wjx6pi5js45i1/send", "7451k95eml4yz0eeds7wjx"),
    ("bitbucket:\n  bitbucket_token: ao8phgyh6zbiv1y1kdis6i3hzllzzquv", "ao8phgyh6zbiv1y1kdis6i3"),
    ('{"codecov": {"token": "7451k95eml4yz0eeds7wjx6pi5js45i1"}}', "7451k95eml4yz0eeds7wjx"),
    ('client = Client(token="fpbf2O0mkoJ2LnBxN3BHWh1q6paVx5ATwvj8Gwp3")', "fpbf2O0mkoJ2LnBxN3BHWh1q6"),
    ("AuthError: 401 for Client(api_key='qf0567lqhijkcdkgzs80tl37xj2nwg')", "qf0567lqhijkcdkgzs80tl37xj2nwg"),
    ('System.setProperty("ETSY_TOKEN", "8l8rwd3p364s616jwgpcl5fh")', "8l8rwd3p364s616jwgpcl5fh"),
])
def test_vendor_formats_and_paste_shapes(text, secret):
    out = _r(text)
    assert secret not in out, out


@pytest.mark.parametrize("first", [
    "ADAFRUIT_TOKEN=v_gzzlxo8lfand1iywylw8qf9s704mby", "--token v_gzzlxo8lfand1iywylw8qf9s704mby",
    '{"password": "v_gzzlxo8lfand1iywylw8qf9s704mby"}', "https://u:v_gzzlxo8lfand1iywylw8qf9s704mby@host/x",
])
def test_one_value_redacted_everywhere_once_found_anywhere(first):
    out = _r(f"{first}\nINFO uploading\nINFO retrying with v_gzzlxo8lfand1iywylw8qf9s704mby (attempt 2)\n"
             "ERROR 'v_gzzlxo8lfand1iywylw8qf9s704mby' rejected")
    assert "gzzlxo8lfand" not in out, out
    assert out.count("<redacted>") == 3 and "(attempt 2)" in out


@pytest.mark.parametrize("text", [
    'dispatch_key = "PrivateUse1"', "eod_token=self.eod_token,", "pad_token=tokenizer.pad_token,",
    'os.environ["AWS_SECRET_ACCESS_KEY"] = aws_secret_access_key', "ARROW_KEY_FLAG = 1 << 8",
    "LLM_TOKEN_INDICATOR = 3", "The token to use as HTTP bearer authorization for remote files.",
    "https://github.com/NVIDIA/DeepLearningExamples/blob/master/TensorFlow2/gpu_affinity.py",
    "https://github.com/lucidrains/alphafold3-pytorch",
    "https://huggingface.co/meta-llama/Llama-2-7b-hf/resolve/main/config.json",
    "https://github.com/pytorch/pytorch/commit/0123456789abcdef0123456789abcdef01234567",
    "https://hf.co/x/y/resolve/3f9a1c2b4d5e6f708192a3b4c5d6e7f809a1b2c3/model-00001-of-00002.safetensors",
    "cache_key = f'{name}-{version}'", '"key": "model.layers.0.self_attn.q_proj.weight"',
    "token = get_token()", "password = getpass.getpass()", "tokenizer = AutoTokenizer.from_pretrained(name)",
])
def test_ml_code_and_urls_are_left_alone(text):
    assert _r(text) == text


def test_a_secret_pasted_into_fl_device_is_redacted_across_the_whole_report(capsys, monkeypatch):
    token = "ghp_kvc6n6zztsacwr635fkg9pfflbv93exyabc0"
    monkeypatch.setenv("FL_DEVICE", token)
    torch_fl.reset()
    assert main(["bugreport"]) == 0
    out = capsys.readouterr().out
    assert token not in out and "kvc6n6zztsacwr635" not in out
    device = next(line for line in out.splitlines() if line.startswith("- **device**:"))
    assert device.startswith("- **device**: <redacted> -> "), device
    assert "FL_DEVICE=<redacted>" in out
    problems = out.split("**Problems found by `torchfl doctor`:**", 1)[1]
    assert "1. " in problems and "<redacted>" in problems


def test_a_random_key_in_fl_device_is_redacted_everywhere_too(capsys, monkeypatch):
    key = "Zq9vX2k7Lm4Np8Rt1Ws6Yb3Kd5"  # no vendor's shape: one long random word
    monkeypatch.setenv("FL_DEVICE", key)
    torch_fl.reset()
    assert main(["bugreport"]) == 0
    out = capsys.readouterr().out
    assert key not in out and out.count("<redacted>") >= 3  # the listing, the device line, the problem


def test_fl_values_that_are_not_secrets_stay(capsys, monkeypatch):
    monkeypatch.setenv("FL_DEVICE", "emu:nosuch")
    torch_fl.reset()
    assert main(["bugreport"]) == 0
    out = capsys.readouterr().out
    assert "FL_DEVICE=emu:nosuch" in out and "no device description named 'nosuch'" in out
