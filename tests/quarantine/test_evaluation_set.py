"""The semantic quarantine's evaluation set (data/benchmarks/paraphrases/reworded.jsonl): reworded enough,
every style, the recorded split, originals equal to the items."""

from assets.quarantine import evaluation
from assets.quarantine.benchmarks import load_items


def test_reworded_rows_share_few_content_words_and_keep_the_recorded_split():
    rows = evaluation.load_reworded()
    items = {it.item_id: it.text for it in load_items() + evaluation.extra_items()}
    split = evaluation.split_of([r["item_id"] for r in rows])
    for r in rows:
        assert r["original"] == items[r["item_id"]], r["item_id"]
        assert r["content_share"] == evaluation.content_share(r["original"], r["paraphrase"])
        assert r["content_share"] <= evaluation.MAX_CONTENT_SHARE, r["item_id"]
        assert r["negative_content_share"] == evaluation.content_share(r["original"], r["negative"])
        assert r["split"] == split[r["item_id"]]
        assert r["style"] in evaluation.STYLES
    assert {r["style"] for r in rows} == set(evaluation.STYLES)
    assert {r["benchmark"] for r in rows} == {"gsm8k", "mmlu_redux", "humaneval", "trivia_qa_tl", "completion_tl"}
    assert sum(r["split"] == "test" for r in rows) == 21


def test_split_is_seeded_per_benchmark():
    ids = [f"b{b}/test/{i}" for b in range(2) for i in range(5)]
    assert evaluation.split_of(ids) == evaluation.split_of(list(reversed(ids)))
    assert sum(v == "calibration" for v in evaluation.split_of(ids).values()) == 6
