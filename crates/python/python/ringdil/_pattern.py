"""The forms a ``pattern`` argument may take, turned into one :class:`ringdil.Pattern`.

Kept in one place so that every function accepts the same forms and rejects the rest
with the same message.
"""

import os

from ._ringdil import Pattern


def as_pattern(pattern):
    """``None`` (dense), a :class:`Pattern`, a dict of pattern-file fields, or the path
    of a pattern file (``.json``, ``.toml``) -> ``None`` or a :class:`Pattern`."""
    if pattern is None or isinstance(pattern, Pattern):
        return pattern
    if isinstance(pattern, dict):
        return Pattern.from_dict(pattern)
    if isinstance(pattern, (str, os.PathLike)):
        return Pattern.from_file(os.fspath(pattern))
    raise TypeError(
        "pattern: expected None, a dict of pattern-file fields, a path to a pattern file "
        f"or a ringdil.Pattern, got {type(pattern).__name__}"
    )
