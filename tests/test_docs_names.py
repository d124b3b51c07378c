"""The file names the documentation tells users to type are the ones the code uses: the
ResNet-152 weights file (``storage.features.RESNET152_FILENAME``) and Flickr8k's image
folder, which its archive names ``Flicker8k_Dataset`` (sic), as ``storage.build`` says.
The pages that show how to build a store name both; no page names another."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import storage.build
from storage.features import RESNET152_FILENAME

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("docs/data.md", "docs/cluster.md")  # the pages with the build commands
EVERY_PAGE = sorted(str(p.relative_to(ROOT)) for p in [ROOT / "README.md", *ROOT.glob("docs/*.md")])
FLICKR8K_IMAGES = "Flicker8k_Dataset"  # the folder Flickr8k_Dataset.zip unpacks to
NAMES = {
    r"resnet152-\w+\.pth": RESNET152_FILENAME,
    r"Flick\w*8k_Dataset(?!\.zip)": FLICKR8K_IMAGES,
}


@pytest.mark.parametrize("doc", EVERY_PAGE)
@pytest.mark.parametrize(("pattern", "expected"), list(NAMES.items()))
def test_documented_file_names_are_the_codes(doc: str, pattern: str, expected: str) -> None:
    found = re.findall(pattern, (ROOT / doc).read_text(encoding="utf-8"))
    assert found or doc not in DOCS, f"{doc} names no {pattern}"
    assert set(found) <= {expected}, f"{doc}: {sorted(set(found))}, the code uses {expected}"


def test_the_build_cli_says_the_same_names() -> None:
    usage = storage.build.__doc__ or ""
    assert FLICKR8K_IMAGES in usage and RESNET152_FILENAME in usage
