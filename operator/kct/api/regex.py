"""RE2 syntax checks for match selectors.

Recent brokers compile `match` values with RE2/J, so a pattern Python's `re` accepts (look-behind,
back-references) can still be refused by the broker, or worse, accepted by an older broker and then
never match. We check with Google's RE2 (the engine RE2/J ports) before anything is sent to Kafka.
"""

from __future__ import annotations

import re2

__all__ = ["re2_syntax_error"]

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # the error comes back as an exception; don't also print it through absl


def re2_syntax_error(pattern: str) -> str | None:
    """Why RE2 refuses `pattern`, or None when it compiles."""
    try:
        re2.compile(pattern, _OPTIONS)
    except re2.error as error:
        reason = error.args[0] if error.args else "invalid pattern"
        return reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
    return None
