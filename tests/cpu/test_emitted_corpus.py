"""Every plan of tests/emitted_digest.py's fixed corpus emits (every candidate of every export,
soundness class, built-in and loss, at its sizes, at sizes dividing no tile, on 16-bit inputs):
the emitter's internal checks hold on all of them, among them that it allocates exactly the
shared windows and temporaries the plan lists (plan.shared). Only the tiles that ask for the
ping-pong schedule may be refused, and then as the user's error (GraphError) naming why."""
import emitted_digest


def test_every_plan_of_the_fixed_corpus_emits():
    d = emitted_digest.digests()
    wrong = {k: v for k, v in d.items() if v.startswith("refused") and not (k.endswith("@pingpong") and "GraphError" in v)}
    assert not wrong, sorted(wrong.items())[:5]
    assert sum(not v.startswith("refused") for v in d.values()) >= 900  # the corpus is there (a missing source would shrink it)
