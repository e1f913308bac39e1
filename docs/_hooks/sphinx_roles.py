"""mkdocs hook: render the Sphinx roles in vecenv's docstrings as links.

The docstrings say ``:class:`vecenv.FailurePolicy``` (Sphinx style); mkdocstrings renders that as
``:class:<code>vecenv.FailurePolicy</code>``. This hook drops the role and, for a dotted name,
wraps the code in an optional autorefs cross-reference, which mkdocs-autorefs turns into a link
when the object is in the reference (and leaves as plain code otherwise). ``~a.b.C`` shows ``C``.
"""

from __future__ import annotations

import re

_ROLE = re.compile(r":(?:class|meth|func|mod|attr|data|exc|obj|const):<code>(~?)([^<]+)</code>")


def _replace(match: re.Match[str]) -> str:
    short, name = match[1], match[2]
    title = name.rsplit(".", 1)[-1] if short else name
    if "." not in name:
        return f"<code>{title}</code>"
    return f'<autoref identifier="{name}" optional><code>{title}</code></autoref>'


def on_page_content(html: str, **kwargs: object) -> str:
    return _ROLE.sub(_replace, html)
