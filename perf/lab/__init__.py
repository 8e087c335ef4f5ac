"""Lab tools: one-off measurements that decide whether a kernel change is worth writing."""

from perf.errors import ConfigError


def counts(text: str, option: str, what: str, example: str = "1,2,4") -> tuple[int, ...]:
    """A lab tool's comma-separated option ('1,2,4') as distinct positive integers; anything else
    a one-line error naming the option (exit 2 at the error boundary)."""
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdecimal() and int(p) >= 1 for p in parts) or len(set(map(int, parts))) != len(parts):
        raise ConfigError(f"{option} {text}: expected distinct {what}, e.g. {example}")
    return tuple(int(p) for p in parts)
