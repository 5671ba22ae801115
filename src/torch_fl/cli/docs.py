"""`torchfl docs`: where the documentation is. The pages ship inside the package (the wheel's
``torch_fl/docs/``; a checkout's ``docs/``), so every help text can name a page that exists wherever torch-fl
is installed: ``torchfl docs TOPIC`` prints that page's path, ``--show`` the page itself.

Exit status: 0 found; 1 no pages shipped with this copy (the web home, when the package metadata names one,
is printed instead); 2 a TOPIC that is not a page.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .args import add_json, command_parser
from .exits import CommandError

OK, NOT_SHIPPED, BAD_TOPIC = 0, 1, 2
DISTRIBUTION = "torch-fl"
# The package metadata's Project-URL labels (pyproject.toml [project.urls]) that lead to the docs, best first.
URL_LABELS = ("documentation", "docs", "homepage", "home", "source", "repository")


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = command_parser(sub, name, help_text)
    parser.add_argument("topic", nargs="?", metavar="TOPIC",
                        help="a page: its name without .md (cli, analysis, compile, errors, ...)")
    parser.add_argument("--show", action="store_true", help="print the page's text instead of its path")
    add_json(parser, what="the pages (or the TOPIC's path)")


def docs_folder() -> Path | None:
    """The folder of shipped pages: torch_fl/docs in an installed wheel, else docs/ of a source checkout."""
    package = Path(__file__).resolve().parents[1]
    for folder in (package / "docs", package.parents[1] / "docs"):
        if (folder / "cli.md").is_file():
            return folder
    return None


def pages(folder: Path) -> dict[str, str]:
    """topic -> the page's title (its first '# ' heading), in name order."""
    found = {}
    for page in sorted(folder.glob("*.md")):
        title = ""
        with page.open(encoding="utf-8", errors="replace") as text:
            for line in text:
                if line.startswith("# "):
                    title = line[2:].strip().replace("`", "")
                    break
        found[page.stem] = title
    return found


def web_home() -> str | None:
    """The documentation URL from the installed package's metadata (Project-URL), if it names one."""
    from importlib import metadata

    try:
        urls = metadata.metadata(DISTRIBUTION).get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        return None
    labelled = {}
    for entry in urls:
        label, _, url = entry.partition(",")
        labelled.setdefault(label.strip().lower(), url.strip())
    return next((labelled[label] for label in URL_LABELS if labelled.get(label)), None)


def run(args: argparse.Namespace) -> int:
    from ..report import Report
    from .output import emit

    folder = docs_folder()
    url = web_home()
    if folder is None:
        where = f"; online: {url}" if url else ""
        message = (f"torchfl docs: the documentation pages are not shipped with this copy of torch-fl "
                   f"({Path(__file__).resolve().parents[1]}){where}")
        emit(Report("torch-fl documentation", {"folder": None, "online": url, "pages": {}},
                    text=f"{url}\n" if url else "", messages=[message]), json_path=args.json)
        return NOT_SHIPPED
    topics = pages(folder)
    if args.topic is None and not args.show:
        width = max(map(len, topics))
        lines = [f"torch-fl documentation: {folder}", *([f"online: {url}"] if url else []),
                 *(f"  {topic.ljust(width)}  {title}" for topic, title in topics.items()),
                 "Open a page: torchfl docs TOPIC (its path), torchfl docs TOPIC --show (its text)"]
        emit(Report("torch-fl documentation", {"folder": str(folder), "online": url, "pages": topics},
                    text="\n".join(lines) + "\n"), json_path=args.json)
        return OK
    topic = (args.topic or "cli").removeprefix("docs/").removesuffix(".md")
    if topic not in topics:
        from ..errors import did_you_mean

        raise CommandError(f"no page '{args.topic}'.{did_you_mean(topic, list(topics))} Pages: {', '.join(topics)}",
                           BAD_TOPIC)
    page = folder / f"{topic}.md"
    data = {"topic": topic, "title": topics[topic], "path": str(page)}
    text = page.read_text(encoding="utf-8", errors="replace") if args.show else f"{page}\n"
    emit(Report(topics[topic], data, text=text), json_path=args.json)
    return OK
