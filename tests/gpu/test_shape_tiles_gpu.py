"""GPU checks (marker gpu; skipped without CUDA) of the plans whose tiles come from the shape
(derive/shape_tiles.py) and of head dimensions that are no whole number of MMA pieces (their
GEMMs on the CUDA cores): the shipped default at such shapes matches the float32 reference on
fresh random inputs, outputs NaN-poisoned (leantile.compile's verify). Written 2026-11-25 on a
machine without a GPU budget left: run it on the device (`pytest -m gpu tests/gpu`)."""
import pytest

import leantile
from leantile import architectures
from leantile.derive import candidates
from leantile.derive.shape_tiles import FLASH_SMALL_GRID_TILES, FLASH_WIDE_KEYS, FLASH_WIDE_TILES

pytestmark = pytest.mark.gpu

SHAPED = [  # (architecture, sizes, the tiles the default must have)
    ("attention", {"h": 2, "t_q": 200, "t_kv": FLASH_WIDE_KEYS + 52, "d_h": 128}, FLASH_WIDE_TILES),
    ("gqa_attention", {"h_kv": 2, "g": 4, "t_q": 136, "t_kv": FLASH_WIDE_KEYS + 200, "d_h": 128}, FLASH_WIDE_TILES),
    ("attention", {"h": 3, "t_q": 300, "t_kv": 520, "d_h": 64}, FLASH_SMALL_GRID_TILES),
]


@pytest.mark.parametrize("arch,sizes,want", SHAPED, ids=[f"{a}-{s}" for a, s, _ in SHAPED])
def test_shape_tiled_attention_default_is_exact(arch, sizes, want):
    """Each unsplit flash candidate at its default tiles (a grid this small ranks the split
    plans first; at the shapes people run these tiles are the default)."""
    g = architectures.build(arch, **sizes)
    for c in [c.name for c in candidates(g) if not c.name.endswith("split") and c.name != "unfused"]:
        k = leantile.compile(g, candidate=c)
        assert {p: k.plan.tiles[p] for p in want} == want, (c, k.plan.tiles)
        for seed in (3, 4):
            v = k.verify(seed=seed)
            assert v["ok"], (c, k.plan.tiles, v)


@pytest.mark.parametrize("arch,sizes", [(a, s) for a, s, _ in SHAPED], ids=[f"{a}-{s}" for a, s, _ in SHAPED])
def test_shape_tiled_attention_shipped_default_is_exact(arch, sizes):
    k = leantile.compile(architectures.build(arch, **sizes), tuned=False)
    for seed in (3, 4):
        v = k.verify(seed=seed)
        assert v["ok"], (k.plan.candidate, k.plan.tiles, v)


@pytest.mark.parametrize("d_h", [17, 24, 40, 72, 80])
def test_head_dimensions_off_the_mma_grid_run_exact(d_h):
    k = leantile.compile(architectures.build("attention", h=2, t_q=70, t_kv=130, d_h=d_h), tuned=False)
    v = k.verify(seed=d_h)
    assert v["ok"], (k.plan.candidate, k.plan.tiles, v)
