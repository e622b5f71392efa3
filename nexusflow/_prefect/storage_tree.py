"""A prefix of the result storage as a tree: the names under it, and deleting all of it.

Prefect's storage blocks read and write one key at a time; listing and deleting are each
storage's own. The local file system (nexusflow's atomic one included) and an S3 bucket
(``prefect-aws``, or any S3-compatible server) are known here; any other storage is refused
with its type named, never skipped in silence."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import anyio
from prefect.filesystems import LocalFileSystem, WritableFileSystem

from .errors import storage_cannot_list


def _local_root(storage: LocalFileSystem, prefix: str) -> Path:
    return Path(storage.basepath or ".").expanduser() / prefix


def _s3(storage: WritableFileSystem) -> tuple[Any, str, str] | None:
    """(client, bucket, the bucket folder with a trailing slash or ''), for an ``S3Bucket``."""
    bucket = getattr(storage, "bucket_name", None)
    credentials: Any = getattr(storage, "credentials", None)
    if not isinstance(bucket, str) or not hasattr(credentials, "get_s3_client"):
        return None
    folder = str(getattr(storage, "bucket_folder", "") or "").strip("/")
    return credentials.get_s3_client(), bucket, f"{folder}/" if folder else ""


async def children(storage: WritableFileSystem, prefix: str) -> list[str]:
    """The names directly under ``prefix`` (its sub-folders), sorted."""
    if isinstance(storage, LocalFileSystem):
        root = _local_root(storage, prefix)
        return sorted(entry.name for entry in root.iterdir() if entry.is_dir()) if root.is_dir() else []
    return await _s3_listed(storage, prefix, "CommonPrefixes", "Prefix")


async def files(storage: WritableFileSystem, prefix: str) -> list[str]:
    """The names of the records directly under ``prefix``, sorted; a write's temporary file
    (its name starts with a dot) is none of them."""
    if isinstance(storage, LocalFileSystem):
        root = _local_root(storage, prefix)
        if not root.is_dir():
            return []
        return sorted(entry.name for entry in root.iterdir() if entry.is_file() and not entry.name.startswith("."))
    return [name for name in await _s3_listed(storage, prefix, "Contents", "Key") if not name.startswith(".")]


async def _s3_listed(storage: WritableFileSystem, prefix: str, kind: str, field: str) -> list[str]:
    """The names one level under ``prefix`` in a bucket: its folders (``CommonPrefixes``) or
    its objects (``Contents``), sorted."""
    s3 = _s3(storage)
    if s3 is None:
        raise storage_cannot_list(type(storage).__name__)
    client, bucket, folder = s3
    start = f"{folder}{prefix.strip('/')}/"

    def listed() -> list[str]:
        names: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=start, Delimiter="/"):
            names += [entry[field][len(start) :].rstrip("/") for entry in page.get(kind, [])]
        return sorted(name for name in names if name)

    return await anyio.to_thread.run_sync(listed)


async def delete_tree(storage: WritableFileSystem, prefix: str) -> int:
    """Delete every record under ``prefix``; how many there were."""
    if isinstance(storage, LocalFileSystem):
        root = _local_root(storage, prefix)

        def removed() -> int:
            if not root.exists():
                return 0
            count = sum(1 for path in root.rglob("*") if path.is_file())
            shutil.rmtree(root)
            return count

        return await anyio.to_thread.run_sync(removed)
    s3 = _s3(storage)
    if s3 is None:
        raise storage_cannot_list(type(storage).__name__)
    client, bucket, folder = s3
    start = f"{folder}{prefix.strip('/')}/"

    def deleted() -> int:
        count = 0
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=start):
            keys = [{"Key": entry["Key"]} for entry in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
                count += len(keys)
        return count

    return await anyio.to_thread.run_sync(deleted)


async def delete_record(storage: WritableFileSystem, key: str) -> int:
    """Delete the one record ``key``; 1 if there was one, else 0."""
    if isinstance(storage, LocalFileSystem):
        path = _local_root(storage, key)

        def removed() -> int:
            try:
                path.unlink()
            except FileNotFoundError:
                return 0
            return 1

        return await anyio.to_thread.run_sync(removed)
    s3 = _s3(storage)
    if s3 is None:
        raise storage_cannot_list(type(storage).__name__)
    client, bucket, folder = s3

    def deleted() -> int:
        found = client.list_objects_v2(Bucket=bucket, Prefix=f"{folder}{key}", MaxKeys=1).get("KeyCount", 0)
        client.delete_object(Bucket=bucket, Key=f"{folder}{key}")
        return 1 if found else 0

    return await anyio.to_thread.run_sync(deleted)
