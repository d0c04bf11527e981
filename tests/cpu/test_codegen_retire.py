"""leantile.codegen_retire: a pipeline stage goes back to the producer only after every wgmma
issued before its release has retired (TileLang 0.1.15 releases it right after an asynchronous
issue). The sources below are the shape TileLang prints for a warp-specialised T.Pipelined loop."""
from leantile.codegen_retire import retire_before_release, unretired_releases

ASYNC = """\
extern "C" __global__ void __launch_bounds__(384, 1) k_kernel(half_t* __restrict__ Q) {
  for (int k_1 = 0; k_1 < 32; ++k_1) {
    mbarrier[(k_1 & 1)].wait(((k_1 & 3) >> 1));
    {
      tl::warpgroup_arrive();
      tl::wgmma_ss<>(a, b, c, 0);
      tl::warpgroup_commit_batch();
    }
    mbarrier[((k_1 & 1) + 12)].arrive();
    tl::wait_wgmma<1>();
    x[0] = y[0];
    {
      tl::warpgroup_arrive();
      tl::wgmma_rs<>(a, b, c, 1);
      tl::warpgroup_commit_batch();
      tl::warpgroup_wait<0>();
      tl::warpgroup_fence_operand(c, 128);
    }
    mbarrier[((k_1 & 1) + 10)].arrive();
  }
}
"""


def _lines(src):
    return [ln.strip() for ln in src.split("\n")]


def test_a_release_after_an_asynchronous_issue_moves_after_the_wait_that_retires_it():
    assert unretired_releases(ASYNC) == [9]
    fixed = retire_before_release(ASYNC)
    assert unretired_releases(fixed) == []
    lines = _lines(fixed)
    release = lines.index("mbarrier[((k_1 & 1) + 12)].arrive();")
    assert release > lines.index("tl::warpgroup_wait<0>();")
    assert release < lines.index("mbarrier[((k_1 & 1) + 10)].arrive();")
    assert lines[release - 1] == "}"  # after the block that holds the wait, at the release's own depth
    assert sorted(lines) == sorted(_lines(ASYNC))  # moved, nothing else changed


def test_releases_after_synchronous_gemms_stay():
    sync = ASYNC.replace("      tl::warpgroup_commit_batch();\n    }\n    mbarrier[((k_1 & 1) + 12)]",
                         "      tl::warpgroup_commit_batch();\n      tl::warpgroup_wait<0>();\n    }\n    mbarrier[((k_1 & 1) + 12)]")
    assert sync != ASYNC
    assert unretired_releases(sync) == []
    assert retire_before_release(sync) == sync


def test_a_release_with_no_later_retiring_wait_in_its_block_is_reported_and_left():
    stuck = ASYNC.replace("      tl::warpgroup_wait<0>();\n", "")
    fixed = retire_before_release(stuck)
    assert fixed == stuck
    assert 9 in unretired_releases(stuck)


def test_groups_outstanding_at_a_loop_body_end_count_at_its_start():
    carried = """\
extern "C" __global__ void k_kernel(half_t* Q) {
  for (int k = 0; k < 8; ++k) {
    mbarrier[(k & 1)].arrive();
    {
      tl::warpgroup_arrive();
      tl::wgmma_ss<>(a, b, c, 0);
      tl::warpgroup_commit_batch();
    }
  }
}
"""
    assert unretired_releases(carried) == [3]


def test_barriers_an_emitter_names_itself_are_its_own_business():
    """emit.overlap releases its K buffer after wait<1> while P V, which reads V only, still runs:
    a named barrier (k_free) is not TileLang's pipeline and stays where the emitter put it."""
    named = ASYNC.replace("mbarrier[((k_1 & 1) + 12)].arrive();", "k_free[(k_1 & 1)].arrive();")
    assert unretired_releases(named) == []
    assert retire_before_release(named) == named
