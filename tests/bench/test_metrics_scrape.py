"""bench/metrics_scrape.py: exited processes' files make a scrape read more files; folded,
one set is left and the scrape reads what it reads with no exits."""

from __future__ import annotations

from bench import metrics_scrape


def test_folding_leaves_one_set_of_files_whatever_the_exits() -> None:
    few, many = metrics_scrape.measure(2, 1), metrics_scrape.measure(20, 1)
    for row in (few, many):
        assert row["folded"]["files"] == 3  # type: ignore[index]
    # counter, histogram and sum-gauge files per exited process (the copies and the original)
    assert many["left_as_they_were"]["files"] == 3 * 21  # type: ignore[index]
    assert few["left_as_they_were"]["files"] == 3 * 3  # type: ignore[index]
