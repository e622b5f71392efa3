"""Overlap of timed intervals: how many things were in flight at once."""


def most_in_flight(intervals: list[tuple[float, float]]) -> int:
    """The largest number of intervals open at one moment (an end before a start at a tie)."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most
