"""A self-contained HTML page: sections of text, tables and PNGs embedded as base64, so
the one file opens anywhere (a browser, MLflow's artifact viewer, an e-mail)."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

_CSS = """
body { font-family: system-ui, sans-serif; margin: 24px auto; padding: 0 16px; max-width: 1220px;
  color: #222; }
h1 { font-size: 1.5em; margin-bottom: 4px; } h2 { border-bottom: 1px solid #ccc; margin-top: 32px; }
.facts { color: #555; } .note { background: #fff6dd; border-left: 4px solid #e0b000;
  padding: 6px 10px; margin: 8px 0; } p.lead { color: #444; max-width: 60em; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0 16px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; }
.text1 td:nth-child(1), .text2 td:nth-child(-n+2), .text3 td:nth-child(-n+3) { text-align: left; }
.scroll { max-width: 100%; overflow-x: auto; } .scroll table { margin-top: 0; }
img.wide { max-width: 100%; } .grid { display: flex; flex-wrap: wrap; gap: 8px; }
.grid img { width: 370px; border: 1px solid #eee; } nav a { margin-right: 12px; }
"""


@dataclass
class Section:
    anchor: str
    title: str
    lead: str = ""  # one paragraph saying what the section shows
    parts: list[str] = field(default_factory=list)  # HTML fragments, in order

    def text(self, text: str) -> Section:
        self.parts.append(f"<p>{html.escape(text)}</p>")
        return self

    def note(self, text: str) -> Section:
        self.parts.append(f'<div class="note">{html.escape(text)}</div>')
        return self

    def image(self, path: Path, alt: str) -> Section:
        self.parts.append(_img(path, alt, "wide"))
        return self

    def gallery(self, paths: Sequence[tuple[Path, str]]) -> Section:
        images = "".join(_img(path, alt, "") for path, alt in paths)
        self.parts.append(f'<div class="grid">{images}</div>')
        return self

    def table(self, frame: pd.DataFrame, caption: str = "", *, text_columns: int = 1) -> Section:
        """``frame`` as an HTML table, its first ``text_columns`` (1-3) left-aligned."""
        if caption:
            self.parts.append(f"<h3>{html.escape(caption)}</h3>")
        if frame.empty:
            self.parts.append("<p><em>(empty)</em></p>")
        else:
            table = frame.to_html(
                index=False,
                na_rep="-",
                border=0,
                float_format=_number,
                classes=f"text{text_columns}",
            )
            # a table wider than the page scrolls inside its box, the page does not
            self.parts.append(f'<div class="scroll">{table}</div>')
        return self


def _number(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1 else f"{value:.2f}"


def _img(path: Path, alt: str, css_class: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (
        f'<img class="{css_class}" alt="{html.escape(alt)}" title="{html.escape(alt)}" '
        f'src="data:image/png;base64,{data}">'
    )


def render_page(
    title: str, facts: Sequence[str], notes: Sequence[str], sections: Sequence[Section]
) -> str:
    nav = "".join(f'<a href="#{s.anchor}">{html.escape(s.title)}</a>' for s in sections)
    body = [
        f"<h1>{html.escape(title)}</h1>",
        "".join(f'<div class="facts">{html.escape(f)}</div>' for f in facts),
        "".join(f'<div class="note">{html.escape(n)}</div>' for n in notes),
        f"<nav>{nav}</nav>",
    ]
    for section in sections:
        body.append(f'<h2 id="{section.anchor}">{html.escape(section.title)}</h2>')
        if section.lead:
            body.append(f'<p class="lead">{html.escape(section.lead)}</p>')
        body.extend(section.parts)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
