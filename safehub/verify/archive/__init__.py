"""Checking and extracting a GitHub zipball without trusting it, then tying it to the commit.

A zipball is untrusted input until it has passed every check here. :func:`extract`
refuses, before writing anything:

* an archive whose zip comment does not name the expected commit (``git archive`` writes
  the commit id there), or with more entries than the limit (read from the end records,
  before the central directory is parsed);
* anything but a plain zip of stored or deflated entries: encryption, other compression,
  zip64 records that disagree, a central directory that holds more than declared, local
  headers that disagree with it, overlapping entries, names that are not UTF-8;
* entries outside one top folder, absolute paths, ``..``, ``.git``, backslashes, control
  characters, empty path components, names no filesystem can hold;
* special files (devices, FIFOs, sockets), and directory flags that contradict the mode;
* duplicate names, including names equal up to case or Unicode normalisation (they collide
  on macOS and Windows) and a file that is also used as a directory;
* symlinks that are absolute or resolve outside the tree (resolved the way the OS would,
  through other links in the archive, on case-sensitive and case-insensitive filesystems
  alike), and entries reached through a symlink (matched without regard to case);
* more bytes than the limits allow (declared sizes are capped first; inflating never goes
  past the declared size, and each CRC is checked).

It then writes the files read-only into a fresh directory, through directory descriptors
(so nothing is written outside it), hashing while writing, and returns their hashes, the
git tree id and the content digest (:mod:`safehub.digest`). :func:`check_tree` then ties
them to the commit's tree: exactly, or path by path as ``git archive`` makes an archive
under the commit's ``.gitattributes`` (:mod:`safehub.verify.gitattributes`).
"""

from safehub.verify.archive._extract import Extracted, drop_empty_dirs, extract
from safehub.verify.archive._plan import resolve_link
from safehub.verify.archive._treecheck import check_tree
from safehub.verify.archive._types import Difference, Reason, TreeCheck

__all__ = ["Difference", "Extracted", "Reason", "TreeCheck", "check_tree", "drop_empty_dirs",
           "extract", "resolve_link"]
