"""Tiny Karpathy-format JSON files and real image files, for the ingestion tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PIL import Image


def sentence(raw: str, imgid: int, sentid: int) -> dict[str, Any]:
    tokens = raw.lower().replace(".", "").split()
    return {"raw": raw, "tokens": tokens, "imgid": imgid, "sentid": sentid}


def flickr_entry(imgid: int, split: str, n_captions: int = 5) -> dict[str, Any]:
    sents = [
        sentence(f"A dog number {imgid} runs, take {k}.", imgid, imgid * 5 + k)
        for k in range(n_captions)
    ]
    return {
        "filename": f"{1000 + imgid}_dog.jpg",
        "imgid": imgid,
        "split": split,
        "sentids": [s["sentid"] for s in sents],
        "sentences": sents,
    }


def coco_entry(imgid: int, split: str, n_captions: int = 5) -> dict[str, Any]:
    folder = "val2014" if split in ("val", "test", "restval") else "train2014"
    sents = [
        sentence(f"A Cat number {imgid} sits on a mat, take {k}.", imgid, imgid * 7 + k)
        for k in range(n_captions)
    ]
    return {
        "filepath": folder,
        "filename": f"COCO_{folder}_{imgid:012d}.jpg",
        "imgid": imgid,
        "split": split,
        "cocoid": imgid,
        "sentids": [s["sentid"] for s in sents],
        "sentences": sents,
    }


def write_json(path: Path, dataset: str, entries: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"images": entries, "dataset": dataset}))
    return path


def write_images(
    images_dir: Path, entries: list[dict[str, Any]], size: tuple[int, int] = (40, 30)
) -> None:
    """One real JPEG per entry, each a different colour."""
    for entry in entries:
        relative = Path(entry.get("filepath", "")) / entry["filename"]
        target = images_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shade = (entry["imgid"] * 37) % 256
        Image.new("RGB", size, (shade, 255 - shade, 90)).save(target, format="JPEG")
