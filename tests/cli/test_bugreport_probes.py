"""The secret shapes of issue 22's probe (61 lines that `torchfl bugreport` leaked 22 of): none leaks, with
detect-secrets and with our own patterns alone, in the text, in a log and in the environment section."""

from __future__ import annotations

import pytest

from torch_fl import redact
from torch_fl.cli import bugreport, main

JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
       "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
       "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n-----END RSA PRIVATE KEY-----")
AZURE = "lJzRc1YdHaAA2KCNJJ1tkYwF/+mKK6Ygw0NGe170Xu592euJv2wYUtBlV8z+qnlcNQSnIYVTkLWntUO1F8j8rQ=="
PYPI = "pypi-AgEIcHlwaS5vcmcCJGE4ZjY5ZjQ5LWFkYjItNGQ1Zi05ZTM3LTc0ZmQ1ZTM3ZjU5NwACKlszLCJhYmNkIl0AAAYg"

# (line, the secret that must not appear in the output)
PROBES: list[tuple[str, str]] = [
    # JWTs and PEM blocks
    (f"Authorization failed for token {JWT}", "SflKxwRJSMeKKF2QT4fw"),
    (f"jwt={JWT}", "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"),
    (f'{{"id_token": "{JWT}"}}', "SflKxwRJSMeKKF2QT4fw"),
    (f"cookie: session={JWT}; path=/", "eyJzdWIiOiIx"),
    (PEM, "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"),
    (PEM.replace("RSA ", ""), "VTLw7onLRnrq0"),
    (PEM.replace("RSA", "OPENSSH"), "MIIEowIBAAKC"),
    (PEM.replace("RSA", "EC"), "MIIEowIBAAKC"),
    (PEM.replace("RSA PRIVATE KEY", "PGP PRIVATE KEY BLOCK"), "MIIEowIBAAKC"),
    (PEM.rsplit("\n", 1)[0], "VTLw7onLRnrq0"),  # a log tail that cut the END line
    # query parameters of signed URLs and OAuth callbacks
    ("GET https://api.example.com/v1/models?token=abc123def456ghi", "abc123def456ghi"),
    ("https://bucket.s3.amazonaws.com/w.pt?X-Amz-Credential=AKIDEXAMPLE&X-Amz-Signature=f00dfeedbeef1234",
     "f00dfeedbeef1234"),
    ("https://acct.blob.core.windows.net/c/w.bin?sv=2021-08-06&se=2030-01-01&sig=Zm9vYmFyYmF6cXV4", "Zm9vYmFyYmF6cXV4"),
    ("https://storage.googleapis.com/b/o?X-Goog-Signature=0123abcd4567ef89", "0123abcd4567ef89"),
    ("callback https://app.example.com/cb?code=4/0AX4XfWh-secret-code&state=xyz", "0AX4XfWh-secret-code"),
    ("wget 'https://host/file?access_token=ya29.a0AfH6SMBx-tok'", "ya29.a0AfH6SMBx-tok"),
    ("https://host/dl;jsessionid=1;token=semicolonsecret", "semicolonsecret"),
    ("https://host/x?a=1&api_key=k3yk3yk3y", "k3yk3yk3y"),
    # passwords in URLs with @, / and quotes
    ("postgres://bob:p@ssw0rd@db.internal:5432/app", "ssw0rd"),
    ("mysql://bob:pa/ss/wd@db.internal/app", "pa/ss/wd"),
    ('redis://:"quoted pass"@cache:6379', "quoted pass"),
    ("amqp://user:it's-secret@mq/", "it's-secret"),
    ("https://alice:hunter2hunter2@git.example.com/repo.git", "hunter2hunter2"),
    ("mongodb+srv://admin:Sup3r%40Secret@cluster0.example.net/db", "Sup3r%40Secret"),
    ("ftp://u:p@ss:w0rd@ftp.example.com", "w0rd"),
    # command-line options
    ("python train.py --token hf_abcdefghijklmnopqrstuvwx --lr 1e-3", "hf_abcdefghijklmnopqrstuvwx"),
    ("huggingface-cli login --token mytokenvalue123", "mytokenvalue123"),
    ("wandb login --auth=abcd1234efgh", "abcd1234efgh"),
    ("run.sh --password 'two words' --epochs 3", "two words"),
    ("mlflow --secret s3cr3tvalue", "s3cr3tvalue"),
    ("train --hf-token=tok987654321", "tok987654321"),
    # multi-word passwords
    ("password: correct horse battery staple", "horse battery staple"),
    ("db_password = correct horse battery", "horse battery"),
    ("PASSWORD: hunter two three", "hunter two three"),
    ('{"password": "correct horse battery staple"}', "horse battery staple"),
    ("secret: my very long secret phrase", "very long secret phrase"),
    ("passphrase=open sesame please", "sesame please"),
    # vendor token shapes
    ("stripe key sk_live_4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWDarjtT1zdp7dc"),
    ("STRIPE=sk_test_51H8abcDEFghiJKLmnoPQR", "51H8abcDEFghiJKLmnoPQR"),
    ("restricted rk_live_abcdefghijklmnop1234", "abcdefghijklmnop1234"),
    ("maps key AIzaSyD-abcdefghijklmnopqrstuvwxyz12345", "SyD-abcdefghijklmnopqrstuvwxyz12345"),
    (f"twine upload -p {PYPI}", PYPI[5:40]),
    (f"[pypi]\npassword = {PYPI}", PYPI[5:40]),
    (f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={AZURE};EndpointSuffix=core.windows.net",
     AZURE[:30]),
    ("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey=c2VjcmV0a2V5dmFsdWU=",
     "c2VjcmV0a2V5dmFsdWU"),
    ("token ghp_0123456789abcdefghij0123456789abcd", "0123456789abcdefghij0123456789abcd"),
    ("HF_HUB hf_abcdefghijklmnopqrstuv", "abcdefghijklmnopqrstuv"),
    ("openai sk-proj-abcdefghijklmnopqrstuvwx", "abcdefghijklmnopqrstuvwx"),
    ("aws AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("slack xoxb-123456789012-abcdefghijkl", "123456789012-abcdefghijkl"),
    ("gitlab glpat-abcdefghij0123456789", "abcdefghij0123456789"),
    ("npm npm_abcdefghijklmnopqrstuvwxyz0123456789", "abcdefghijklmnopqrstuvwxyz0123456789"),
    # full-width separators (CJK input methods)
    ("密码：hunter2x password：hunter2x", "hunter2x"),
    ("api_key＝zzz-top-secret", "zzz-top-secret"),
    ("token：abcdefgh12345678 secret：s3cr3t-full-width", "s3cr3t-full-width"),
    # headers and assignments
    ("Authorization: Bearer abc.def.ghi-1234567890", "abc.def.ghi-1234567890"),
    ('-H "Authorization: token abcdef123456"', "abcdef123456"),
    ("Authorization：Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
    ("export WANDB_API_KEY=0123456789abcdef", "0123456789abcdef"),
    ("client_secret = 'abc123xyz'", "abc123xyz"),
    ("login(hf_token='abcd1234')", "abcd1234"),
]


def _r(text: str, detector: bool) -> str:
    return redact.redact(text, environ={}, home="/home/alice", user="alice", detector=detector)


def test_there_are_61_probe_shapes():
    assert len(PROBES) == 61


@pytest.mark.parametrize("detector", [True, False], ids=["detect-secrets", "floor"])
def test_no_probe_leaks(detector):
    leaked = [(text, out) for text, secret in PROBES if secret in (out := _r(text, detector))]
    assert leaked == [], f"{len(leaked)} of {len(PROBES)} leak: {leaked}"


def test_detect_secrets_is_used_when_installed():
    assert redact.detectors(), "detect-secrets is a dev dependency (pip install torch-fl[redact])"
    # shapes only detect-secrets' plugins know: SendGrid, Twilio, Telegram
    for secret in ("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",
                   "SKaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "110201543:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawX"):
        assert secret not in _r(f"note {secret} end", True)


def test_environment_section_is_redacted_by_value_shape(capsys, monkeypatch, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("")
    monkeypatch.setenv("FL_DESCRIPTION_PATH", f"https://host/d?token=envtokensecret&x=1{':' + str(tmp_path)}")
    monkeypatch.setenv("CUDA_CACHE_SIG", "Zq9vX2k7Lm4Np8Rt1Ws6Yb3")  # no secret word, a key's shape
    monkeypatch.setenv("PYTHONPATH", f"/opt/lib?sig=pythonpathsig123:{tmp_path}")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu")
    log = tmp_path / "err.log"
    log.write_text("\n".join(text for text, _ in PROBES) + "\n")
    assert main(["bugreport", "--log", str(log), "--lines", "500"]) == 0
    out = capsys.readouterr().out
    leaked = [secret for _, secret in PROBES if secret in out]
    assert leaked == []
    assert "envtokensecret" not in out and "pythonpathsig123" not in out and "Zq9vX2k7Lm4Np8Rt1Ws6Yb3" not in out
    assert "LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu" in out  # paths stay


def test_fl_config_url_with_a_token_is_redacted_in_the_listing():
    listing = bugreport.relevant_env({"FL_CONFIG": "https://cfg.example.com/torch_fl.toml?token=abc123secret",
                                      "FL_DEVICE": "acc0", "FL_HUB_TOKEN": "x"})
    assert listing == {"FL_CONFIG": "https://cfg.example.com/torch_fl.toml?token=<redacted>",
                       "FL_DEVICE": "acc0", "FL_HUB_TOKEN": "<redacted>"}
