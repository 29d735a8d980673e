"""DatasetBatches (seeded per-epoch permutations split between ranks, resumable) and EvalBatches."""

import itertools

import pytest
import torch

from ctxemb.training.data import BatchSource, DatasetBatches, EvalBatches, batch_size_of, count_tokens


def _ids(batch):
    return batch["idx"].tolist()


def _examples(n):
    return [{"idx": torch.tensor(i)} for i in range(n)]


def test_is_a_batch_source_and_reshuffles_each_epoch():
    src = DatasetBatches(_examples(12), batch_size=4, seed=7)
    assert isinstance(src, BatchSource)
    assert src.batches_per_epoch == 3
    batches = [_ids(b) for b in itertools.islice(iter(src), 9)]
    epochs = [sum(batches[i:i + 3], []) for i in (0, 3, 6)]
    assert all(sorted(e) == list(range(12)) for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2]
    # the same seed gives the same order; seed + epoch is all that defines an epoch
    again = DatasetBatches(_examples(12), batch_size=4, seed=7)
    again.set_epoch(1)
    assert sum([_ids(b) for b in itertools.islice(iter(again), 3)], []) == epochs[1]


def test_ranks_split_each_epoch_like_one_process_with_the_global_batch():
    n, b, world = 20, 3, 2
    single = DatasetBatches(_examples(n), batch_size=b * world, seed=1)
    ranks = [DatasetBatches(_examples(n), batch_size=b, seed=1, rank=r, world_size=world) for r in range(world)]
    assert ranks[0].batches_per_epoch == ranks[1].batches_per_epoch == single.batches_per_epoch == 4
    it_single, its = iter(single), [iter(s) for s in ranks]
    for _ in range(8):  # two epochs
        union = sorted(sum((_ids(next(it)) for it in its), []))
        assert union == sorted(_ids(next(it_single)))


def test_padding_gives_every_rank_the_same_number_of_examples():
    ranks = [DatasetBatches(_examples(7), batch_size=2, seed=0, rank=r, world_size=3) for r in range(3)]
    per_rank = [r.epoch_indices(0) for r in ranks]
    assert [len(x) for x in per_rank] == [3, 3, 3]
    assert set(sum(per_rank, [])) == set(range(7))  # 2 repeats pad 7 to 9
    dropped = [DatasetBatches(_examples(7), batch_size=2, seed=0, rank=r, world_size=3, drop_last=True)
               for r in range(3)]
    per_rank = [r.epoch_indices(0) for r in dropped]
    assert [len(x) for x in per_rank] == [2, 2, 2] and len(set(sum(per_rank, []))) == 6


def test_state_dict_resumes_after_the_last_batch_taken():
    src = DatasetBatches(_examples(10), batch_size=3, seed=4)
    it = iter(src)
    for _ in range(5):  # into the second epoch
        next(it)
    state = src.state_dict()
    expected = [_ids(next(it)) for _ in range(6)]
    fresh = DatasetBatches(_examples(10), batch_size=3, seed=4)
    fresh.load_state_dict(state)
    assert [_ids(b) for b in itertools.islice(iter(fresh), 6)] == expected
    other = DatasetBatches(_examples(10), batch_size=2, seed=4)
    with pytest.raises(ValueError, match="batch_size"):
        other.load_state_dict(state)


def test_no_shuffle_keeps_dataset_order():
    src = DatasetBatches(_examples(5), batch_size=2, shuffle=False)
    assert [_ids(b) for b in itertools.islice(iter(src), 4)] == [[0, 1], [2, 3], [4], [0, 1]]


def test_bad_arguments():
    with pytest.raises(ValueError, match="empty"):
        DatasetBatches([], batch_size=2)
    with pytest.raises(ValueError, match="batch_size"):
        DatasetBatches(_examples(3), batch_size=0)
    with pytest.raises(ValueError, match="rank"):
        DatasetBatches(_examples(3), batch_size=1, rank=2, world_size=2)
    with pytest.raises(ValueError, match="drop_last"):
        DatasetBatches(_examples(3), batch_size=4, drop_last=True)
    with pytest.raises(TypeError, match="map-style"):
        DatasetBatches(iter(_examples(3)), batch_size=1)


def test_eval_batches_cover_every_example_once():
    data = _examples(11)
    shards = [EvalBatches(data, batch_size=2, rank=r, world_size=3) for r in range(3)]
    seen = [i for s in shards for b in s for i in _ids(b)]
    assert seen == list(range(11))
    assert [len(s) for s in shards] == [2, 2, 2]
    assert list(shards[0]) and [_ids(b) for b in shards[0]] == [_ids(b) for b in shards[0]]  # re-iterable
    assert list(shards[2].indices) == [7, 8, 9, 10]


def test_batch_helpers():
    batch = {"input_ids": torch.ones(2, 5, dtype=torch.long), "attention_mask": torch.tensor([[1, 1, 1, 0, 0]] * 2)}
    assert count_tokens(batch) == 6 and batch_size_of(batch) == 2
    assert count_tokens({"input_ids": torch.ones(3, 4)}) == 12
    assert count_tokens({"x": torch.ones(3)}) is None and batch_size_of({"x": torch.ones(3)}) == 3


# ---- batches grouped by length ---------------------------------------------------------------------------------


def _lengths(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 120, (n,), generator=g).tolist()


def test_length_grouped_batches_cover_the_epoch_with_less_padding():
    n, lengths = 1000, _lengths(1000)
    plain = DatasetBatches(list(range(n)), batch_size=16, seed=3)
    grouped = DatasetBatches(list(range(n)), batch_size=16, seed=3, lengths=lengths, mega_batch=8)
    for epoch in (0, 1):
        assert sorted(grouped.epoch_indices(epoch)) == sorted(plain.epoch_indices(epoch)) == list(range(n))
    assert grouped.epoch_indices(0) != grouped.epoch_indices(1)  # reshuffled each epoch
    assert grouped.epoch_indices(0) == DatasetBatches(list(range(n)), batch_size=16, seed=3, lengths=lengths,
                                                      mega_batch=8).epoch_indices(0)  # seeded
    ungrouped = plain.padding_fraction(0, lengths=lengths)
    assert grouped.padding_fraction(0) < ungrouped / 3, (grouped.padding_fraction(0), ungrouped)
    order = grouped.epoch_indices(0)
    assert lengths[order[0]] == max(lengths)  # the longest batch comes first
    # brute force: the padding share of the first epoch's batches
    batches = [order[i:i + 16] for i in range(0, n, 16)]
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    assert grouped.padding_fraction(0) == pytest.approx(1 - sum(lengths) / padded)
    assert plain.padding_fraction(0) is None


def test_length_grouped_batches_split_between_ranks_as_one_process_would():
    n, lengths = 203, _lengths(203, seed=1)
    one = DatasetBatches(list(range(n)), batch_size=8, seed=0, lengths=lengths, mega_batch=4)
    ranks = [DatasetBatches(list(range(n)), batch_size=4, seed=0, lengths=lengths, mega_batch=4, rank=r,
                            world_size=2) for r in range(2)]
    whole = one.epoch_indices(0)
    mine = [r.epoch_indices(0) for r in ranks]
    for b in range(one.batches_per_epoch - 1):  # the last (short) batch may be padded on the ranks
        assert sorted(mine[0][4 * b:4 * b + 4] + mine[1][4 * b:4 * b + 4]) == sorted(whole[8 * b:8 * b + 8])


def test_length_grouping_is_part_of_the_resume_state_and_lengths_are_checked():
    lengths = _lengths(40)
    grouped = DatasetBatches(list(range(40)), batch_size=4, lengths=lengths)
    plain = DatasetBatches(list(range(40)), batch_size=4)
    with pytest.raises(ValueError, match="group_by_length=True but this source has group_by_length=False"):
        plain.load_state_dict(grouped.state_dict())
    with pytest.raises(ValueError, match="one length per example: 40 examples, 3 lengths"):
        DatasetBatches(list(range(40)), batch_size=4, lengths=[1, 2, 3])
    with pytest.raises(ValueError, match=r"lengths\[1\] must be a non-negative integer"):
        DatasetBatches(list(range(3)), batch_size=4, lengths=[1, -2, 3])
    with pytest.raises(ValueError, match="mega_batch must be an integer >= 1"):
        DatasetBatches(list(range(3)), batch_size=4, lengths=[1, 2, 3], mega_batch=0)
