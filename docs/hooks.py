"""What the pages state that the code states already is generated from the code, into
the Markdown files themselves (so that a page reads the same on GitHub as on the site),
never copied by hand. ``python docs/hooks.py`` writes it; ``python docs/hooks.py
--check`` lists the pages whose generated parts are stale (exit 1), as
tests/test_docs_site.py does, and a stale page stops the site's build.

A generated part sits between ``<!-- generated: WHAT [ARGS] -->`` and ``<!-- end of
generated -->``:

- ``options MODULE [SUBCOMMAND]``: that command's options, read from its own argument
  parser: the command's real ``main(argv)`` is asked for ``--help`` and the parser that
  would print it is rendered instead;
- ``spaces``: the named search spaces (``gridsearch.spaces.SPACES``);
- ``metric-names``: the metric names (``trainables.names``), each with its meaning from
  ``MEANINGS`` below; a name the code has and this table lacks, or the reverse, is an
  error.

And, as the site's MkDocs hooks (``hooks:`` in mkdocs.yml), pages of the site only:

- ``api/<package>.md``: each package's face and public modules, rendered by mkdocstrings
  from their docstrings (the modules are found on disk, so a new one is listed without
  editing anything);
- ``history.md``: BENCHMARKS.md, every recorded measurement, as a page of the site.

Nothing here starts Ray or reads data: the commands' parsers are built as ``--help``
builds them.
"""

from __future__ import annotations

import argparse
import html
import importlib
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("storage", "trainables", "gridsearch", "analysis")
END = "<!-- end of generated -->"
# a generated part: its opening marker, then (once generated) its text and END
PLACEHOLDER = re.compile(
    r"<!-- generated: (?P<what>[\w-]+)(?P<args>(?: [\w.-]+)*) -->"
    rf"(?P<body>\n(?:(?!<!-- generated: ).)*?{re.escape(END)})?",
    re.DOTALL,
)
REGENERATE = "python docs/hooks.py"


# -- the commands' options, from their parsers ------------------------------------------


class _Parser(BaseException):
    """Carries the parser out of ``main`` (a BaseException, so no ``except Exception`` of
    a command's own error handling stops it)."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__()
        self.parser = parser


def command_parser(module: str, argv: list[str]) -> argparse.ArgumentParser:
    """The parser ``python -m MODULE *argv --help`` prints, taken from the command's own
    ``main``."""

    def grab(self: argparse.ArgumentParser, file: Any = None) -> None:
        raise _Parser(self)

    original = argparse.ArgumentParser.print_help
    argparse.ArgumentParser.print_help = grab  # type: ignore[method-assign]
    try:
        importlib.import_module(module).main([*argv, "--help"])
    except _Parser as found:
        return found.parser
    finally:
        argparse.ArgumentParser.print_help = original  # type: ignore[method-assign]
    raise RuntimeError(f"python -m {module} {' '.join(argv)} --help printed no parser's help")


def _invocation(action: argparse.Action) -> str:
    """``--name METAVAR`` as ``--help`` shows an option (written out here, as argparse's
    own formatting differs between Python versions)."""
    names = ", ".join(action.option_strings)
    if not action.option_strings or action.nargs == 0:
        return names or str(action.metavar or action.dest)
    if action.metavar is not None:
        metavar = action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
    elif action.choices is not None:
        metavar = "{" + ",".join(str(choice) for choice in action.choices) + "}"
    else:
        metavar = action.dest.upper()
    shown = {"?": f"[{metavar}]", "*": f"[{metavar} ...]", "+": f"{metavar} [{metavar} ...]"}
    if isinstance(action.nargs, int):
        return f"{names} {' '.join([metavar] * action.nargs)}"
    return f"{names} {shown.get(str(action.nargs), metavar)}"


def _text(text: str) -> str:
    """Help text as HTML: escaped, white space folded, `backquoted` words as code."""
    escaped = html.escape(" ".join(text.split()), quote=False)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def options_html(module: str, argv: list[str]) -> str:
    """A command's options as one HTML table (a row per option, a header row per group),
    with its description before and its epilog after, as ``--help`` shows them."""
    parser = command_parser(module, argv)
    formatter = parser._get_formatter()
    rows = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a.help is not argparse.SUPPRESS]
        actions = [a for a in actions if not isinstance(a, argparse._HelpAction)]
        if not actions:
            continue
        rows.append(f'<tr><th colspan="2">{html.escape(group.title or "")}</th></tr>')
        for action in actions:
            invocation = html.escape(_invocation(action))
            help_text = _text(formatter._expand_help(action)) if action.help else ""
            rows.append(f"<tr><td><code>{invocation}</code></td><td>{help_text}</td></tr>")
    parts = [f"<p><code>{html.escape(parser.prog)}</code>: {_text(parser.description or '')}</p>"]
    parts.append("<table>\n" + "\n".join(rows) + "\n</table>")
    if parser.epilog:
        parts.append(f"<p>{_text(parser.epilog)}</p>")
    return "\n".join(parts)


# -- the named spaces ------------------------------------------------------------------


def spaces_html() -> str:
    from gridsearch.spaces import SPACES

    rows = [
        f"<tr><td><code>{html.escape(name)}</code></td><td>{_text(space.description)}</td></tr>"
        for name, space in SPACES.items()
    ]
    head = "<tr><th>--space</th><th>what it searches</th></tr>"
    return "<table>\n" + head + "\n" + "\n".join(rows) + "\n</table>"


# -- the metric names ------------------------------------------------------------------

# What each name means; the names themselves come from trainables.names (metric_rows).
MEANINGS = {
    "c2i_r1": "caption to image: % of captions whose image ranks first",
    "c2i_r5": "caption to image: % of captions whose image is in the top 5",
    "c2i_r10": "caption to image: % of captions whose image is in the top 10",
    "c2i_medr": "caption to image: median rank (the lower middle rank, an integer)",
    "c2i_meanr": "caption to image: mean rank",
    "i2c_r1": "image to caption: % of images with one of their 5 captions first",
    "i2c_r5": "image to caption: the same, in the top 5",
    "i2c_r10": "image to caption: the same, in the top 10",
    "i2c_medr": "image to caption: median of each image's best caption rank",
    "i2c_meanr": "image to caption: mean of each image's best caption rank",
    "r10_mean": "mean of c2i_r10 and i2c_r10: the paper's model-selection score",
    "stsb_cosine_pearson": "cosine similarity against the gold scores, Pearson: STS-B dev "
    "(under dev/) or test (test/, ensemble/)",
    "stsb_cosine_spearman": "the same, Spearman",
    "sickr_cosine_pearson": "cosine similarity against the gold scores, Pearson: SICK-R "
    "trial (dev/) or test (test/, ensemble/)",
    "sickr_cosine_spearman": "the same, Spearman",
    "semantic": "dev/: mean of stsb_cosine_pearson and sickr_cosine_pearson on dev data (the "
    "search's semantic objective); test/ and ensemble/: (sts12_16_pearson + sickr_pearson) / "
    "2 on test data (the paper's Fig. 4)",
    "sts12_pearson": "STS12: Pearson of the cosine, mean over its subtasks weighted by pairs",
    "sts13_pearson": "STS13: the same",
    "sts14_pearson": "STS14: the same",
    "sts15_pearson": "STS15: the same",
    "sts16_pearson": "STS16: the same",
    "sts12_pearson_mean": "STS12: plain mean over its subtasks",
    "sts13_pearson_mean": "STS13: the same",
    "sts14_pearson_mean": "STS14: the same",
    "sts15_pearson_mean": "STS15: the same",
    "sts16_pearson_mean": "STS16: the same",
    "sts12_16_pearson": "mean of the five years' pair-weighted Pearsons",
    "stsb_pearson": "STS-B test, SentEval's supervised protocol: Pearson",
    "stsb_spearman": "the same, Spearman",
    "stsb_mse": "the same, mean squared error",
    "sickr_pearson": "SICK-R test, SentEval's supervised protocol: Pearson",
    "sickr_spearman": "the same, Spearman",
    "sickr_mse": "the same, mean squared error",
    "train/loss": "the training loss alone (hinge or Pearson), mean over the epoch",
    "train/attention_penalty": "with --attention-penalty: the heads' diversity penalty, "
    "mean over the epoch (the step minimises the loss plus it, weighted)",
    "train/lr": "the learning rate of the epoch's last step",
    "train/captions_per_s": "training throughput over the epoch",
    "time/train_s": "seconds of training in the epoch",
    "time/eval_s": "seconds of evaluation in the epoch",
    "ensemble/size": "snapshots in the ensemble",
    "ensemble/epoch_1": "the epoch of the ensemble's first snapshot (epoch_2 the second's, ...)",
    "dev/r10_mean_best": "the best dev/r10_mean over the epochs so far: the retrieval objective",
    "dev/semantic_best": "the best dev/semantic over the epochs so far: the semantic objective",
    "ensemble/r10_mean": "present once a trial's last epoch ran: a finished trial",
}


def metric_rows() -> list[tuple[str, str, str]]:
    """(name, where it is reported, meaning) for every name ``trainables.names`` defines."""
    from trainables import names

    where_retrieval = f"{names.DEV}/, {names.TEST}/, {names.ENSEMBLE}/"
    found: list[tuple[str, str]] = [(n, where_retrieval) for n in names.RETRIEVAL]
    dev_only = [n for n in names.DEV_SEMANTIC if n not in names.SEMANTIC]
    found += [(n, f"{names.DEV}/") for n in dev_only]
    both = [n for n in names.SEMANTIC if n in names.DEV_SEMANTIC]
    found += [(n, f"{names.DEV}/, {names.TEST}/, {names.ENSEMBLE}/") for n in both]
    found += [(n, f"{names.TEST}/, {names.ENSEMBLE}/") for n in names.SEMANTIC if n not in both]
    once = [names.LOSS, names.ATTENTION_PENALTY, names.LEARNING_RATE, names.CAPTIONS_PER_S]
    once += [names.TRAIN_SECONDS, names.EVAL_SECONDS]
    found += [(n, "every epoch") for n in once]
    found += [(names.ENSEMBLE_SIZE, "after the last epoch")]
    found += [(names.ensemble_epoch(1), "after the last epoch")]
    found += [(n, "every epoch") for n in (names.BEST_RETRIEVAL, names.BEST_SEMANTIC)]
    found += [(names.FINISHED, "after the last epoch")]
    missing = sorted({n for n, _ in found} - set(MEANINGS))
    stale = sorted(set(MEANINGS) - {n for n, _ in found})
    if missing or stale:
        raise ValueError(
            f"docs/hooks.py MEANINGS: no meaning for {missing}; not a name any more: {stale}"
        )
    return [(n, where, MEANINGS[n]) for n, where in found]


def metric_names_html() -> str:
    from trainables import names

    rows = [
        f"<tr><td><code>{html.escape(n)}</code></td><td>{html.escape(where)}</td>"
        f"<td>{_text(meaning)}</td></tr>"
        for n, where, meaning in metric_rows()
    ]
    example = names.subtask_key("STS12", "MSRpar", "pearson")
    rows.append(
        f"<tr><td><code>{example}</code>, ...</td><td>test/, ensemble/</td><td>one STS "
        "subtask's Pearson or Spearman (<code>trainables.names.subtask_key</code>)</td></tr>"
    )
    head = "<tr><th>name</th><th>reported under</th><th>meaning</th></tr>"
    return "<table>\n" + head + "\n" + "\n".join(rows) + "\n</table>"


# -- the API reference and the history, as generated pages -------------------------------


def public_modules(package: str) -> list[str]:
    """The package and its public modules (no part of the name starts with ``_``)."""
    found = [package]
    for path in sorted((REPO / package).rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if len(parts) > 1 and not any(part.startswith("_") for part in parts):
            found.append(".".join(parts))
    return found


def api_page(package: str) -> str:
    lines = [
        f"# `{package}`",
        "",
        f"The face (`{package}/__init__.py`: what its `__all__` exports to the other packages) "
        "first, then each public module, from their docstrings.",
        "",
    ]
    lines += [f"::: {module}\n" for module in public_modules(package)]
    return "\n".join(lines)


def history_page() -> str:
    """BENCHMARKS.md as a page of the site: its links to files under docs/ made relative
    to the site's root."""
    text = (REPO / "BENCHMARKS.md").read_text(encoding="utf-8")
    return re.sub(r"\]\(docs/", "](", text)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for package in PACKAGES:
        files.append(File.generated(config, f"api/{package}.md", content=api_page(package)))
    files.append(File.generated(config, "history.md", content=history_page()))
    return files


def generated(what: str, args: list[str]) -> str:
    """The text of the generated part ``<!-- generated: WHAT ARGS -->``."""
    if what == "options":
        return options_html(args[0], args[1:])
    if what == "spaces":
        return spaces_html()
    if what == "metric-names":
        return metric_names_html()
    raise ValueError(f"unknown generated part {what!r}")


def regenerate(text: str, where: str = "a page") -> str:
    """``text`` (a page) with every generated part written anew."""

    def part(match: re.Match[str]) -> str:
        what, args = match["what"], match["args"].split()
        try:
            body = generated(what, args)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        opening = match[0][: len(match[0]) - len(match["body"] or "")]
        return f"{opening}\n\n{body}\n\n{END}"

    return PLACEHOLDER.sub(part, text)


def pages() -> list[Path]:
    return sorted((REPO / "docs").glob("*.md"))


def stale_pages() -> list[Path]:
    """The pages whose generated parts are not what the code states now."""
    return [p for p in pages() if regenerate(_read(p), p.name) != _read(p)]


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """A page whose generated parts are stale stops the build (the site shows what the
    files hold, as GitHub does)."""
    if PLACEHOLDER.search(markdown) and regenerate(markdown, page.file.src_path) != markdown:
        raise ValueError(
            f"docs/{page.file.src_path}: its generated parts are stale: run `{REGENERATE}`"
        )
    return markdown


def main(argv: list[str] | None = None) -> int:
    """``python docs/hooks.py``: write every page's generated parts; ``--check``: list
    the stale pages and exit 1 if there are any, writing nothing."""
    parser = argparse.ArgumentParser(
        prog=REGENERATE, description="Write the docs pages' generated parts from the code."
    )
    parser.add_argument("--check", action="store_true", help="list stale pages, write nothing")
    args = parser.parse_args(argv)
    stale = stale_pages()
    for page in stale:
        if args.check:
            print(f"stale: {page.relative_to(REPO)}")
        else:
            page.write_text(regenerate(_read(page), page.name), encoding="utf-8")
            print(f"written: {page.relative_to(REPO)}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(REPO))  # the packages, from a checkout run as a script
    sys.exit(main())
