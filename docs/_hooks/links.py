"""mkdocs hook: a relative link in the docs must name a file that exists in the repository.

The guides link to the source (``../src/vecenv/make.py``) and to the README, which are outside
``docs/``: they work on GitHub, and mkdocs cannot check them (``validation.links.not_found`` is
``info`` in ``mkdocs.yml`` for that reason). This hook checks every relative link, inside or
outside ``docs/``, against the files on disk and warns (failing ``mkdocs build --strict``) when
the target does not exist. Anchors of pages inside ``docs/`` are still checked by mkdocs itself.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any
from urllib.parse import unquote, urlsplit

log = logging.getLogger("mkdocs.hooks.links")

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`[^`\n]*`")
_INLINE = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^)]*[\"'])?\s*\)")
_DEFINITION = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)


def _targets(markdown: str) -> list[str]:
    text = _CODE.sub("", _FENCE.sub("", markdown))
    return _INLINE.findall(text) + _DEFINITION.findall(text)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    source = page.file.abs_src_path
    if source is None:
        return markdown
    for target in _targets(markdown):
        parts = urlsplit(target)
        if parts.scheme or parts.netloc or not parts.path or parts.path.startswith("/"):
            continue  # a URL, an anchor on this page, or an absolute path
        path = os.path.normpath(os.path.join(os.path.dirname(source), unquote(parts.path)))
        if not os.path.exists(path):
            log.warning("Doc file '%s' links to '%s', which does not exist", page.file.src_path, target)
    return markdown
