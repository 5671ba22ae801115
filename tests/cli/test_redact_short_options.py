"""Short options that carry a password only for the command that owns them (issue 42: `twine upload -p ...`)."""
import pytest

from torch_fl import redact

SECRET = [
    ("twine upload -p hunter2pass dist/*", "hunter2pass"),
    ('twine upload -u __token__ -p "two words" dist/*', "two words"),
    ("docker login -u me -p abcDEF123xyz registry.example.com", "abcDEF123xyz"),
    ("podman login -p Passw0rd quay.io", "Passw0rd"),
    ("sshpass -p mypass ssh host", "mypass"),
    ("mysql -u root -pS3cretPw mydb", "S3cretPw"),
    ("az login -u me@example.com -p Passw0rd!", "Passw0rd!"),
    ("oc login -u dev -p devpw https://api.example.com:6443", "devpw"),
]
# `-p` is a port, a flag or a process elsewhere: nothing there is a secret.
HARMLESS = [
    "python train.py -p 8 --lr 0.1",
    "docker run -p 8080:80 image",
    "ls -p foo",
    "mysqldump -h db -u root -p mydb",  # -p alone asks for the password on the terminal
    "pytest -p no:cacheprovider tests",
    "mkdir -p /tmp/run",
]


@pytest.mark.parametrize("text,secret", SECRET)
def test_short_password_option_is_masked(text, secret):
    out = redact.redact(text, environ={}, home="/home/alice", user="alice")
    assert secret not in out and redact.REDACTED in out, out


@pytest.mark.parametrize("text", HARMLESS)
def test_short_option_elsewhere_is_kept(text):
    assert redact.redact(text, environ={}, home="/home/alice", user="alice") == text
