"""Linear-chain CRF: log-likelihood and Viterbi against brute force over every tag sequence, BIO constraints,
masking, gradients, input validation, a tiny learning task and the state_dict round trip."""

import itertools

import pytest
import torch

from ctxemb.modeling.crf import CONSTRAINT_PENALTY, LinearChainCRF, bio_transition_mask

BIO = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}


def _crf(C, seed=0, **kw):
    torch.manual_seed(seed)
    crf = LinearChainCRF(C, **kw)
    with torch.no_grad():  # larger than the init, so that transitions matter in the brute-force comparisons
        for p in crf.parameters():
            p.uniform_(-2.0, 2.0)
    return crf


def _score(crf, em, seq, penalty=True):
    """s(seq) for one row of emissions (n, C), from the parameters directly; disallowed moves cost -1e4."""
    trans, start, end = crf.transitions.detach(), crf.start_transitions.detach(), crf.end_transitions.detach()
    if penalty:
        trans = trans.masked_fill(~crf.allowed_transitions, CONSTRAINT_PENALTY)
        start = start.masked_fill(~crf.allowed_start, CONSTRAINT_PENALTY)
    s = start[seq[0]] + end[seq[-1]] + sum(em[i, y] for i, y in enumerate(seq))
    return float(s + sum(trans[a, b] for a, b in itertools.pairwise(seq)))


def _legal(seq, allowed, allowed_start):
    return bool(allowed_start[seq[0]]) and all(bool(allowed[a, b]) for a, b in itertools.pairwise(seq))


def _batch(C, lengths, seed=0, W=None):
    g = torch.Generator().manual_seed(seed)
    W = W or max(lengths)
    em = torch.randn(len(lengths), W, C, generator=g) * 2
    mask = torch.tensor([[1] * n + [0] * (W - n) for n in lengths], dtype=torch.bool)
    tags = torch.randint(0, C, (len(lengths), W), generator=g).masked_fill(~mask, -100)
    return em, tags, mask


@pytest.mark.parametrize("C", [3, 4, 5])
def test_log_likelihood_matches_brute_force(C):
    crf = _crf(C, seed=C)
    lengths = [1, 2, 3, 4]
    em, tags, mask = _batch(C, lengths, seed=C)
    ll = crf.log_likelihood(em, tags, mask)
    assert ll.shape == (4,) and ll.dtype == torch.float32
    for b, n in enumerate(lengths):
        scores = {seq: _score(crf, em[b], seq) for seq in itertools.product(range(C), repeat=n)}
        log_z = torch.logsumexp(torch.tensor(list(scores.values()), dtype=torch.float64), 0).item()
        assert ll[b].item() == pytest.approx(scores[tuple(tags[b, :n].tolist())] - log_z, abs=1e-4)
        # p over all C^n sequences sums to 1
        all_seqs = torch.tensor(list(itertools.product(range(C), repeat=n))).reshape(-1, n)
        k = all_seqs.shape[0]
        p = crf.log_likelihood(em[b:b + 1, :n].expand(k, n, C), all_seqs, torch.ones(k, n, dtype=torch.bool)).exp()
        assert p.sum().item() == pytest.approx(1.0, abs=1e-5)


def test_forward_reductions():
    crf = _crf(3)
    em, tags, mask = _batch(3, [4, 2, 1])
    ll = crf.log_likelihood(em, tags, mask)
    assert torch.allclose(crf(em, tags, mask, reduction="none"), -ll)
    assert crf(em, tags, mask, reduction="sum").item() == pytest.approx(-ll.sum().item(), rel=1e-6)
    assert crf(em, tags, mask).item() == pytest.approx(-ll.mean().item(), rel=1e-6)
    with pytest.raises(ValueError, match="reduction"):
        crf(em, tags, mask, reduction="token_mean")


@pytest.mark.parametrize("C", [3, 4, 5])
def test_decode_matches_brute_force(C):
    crf = _crf(C, seed=10 + C)
    lengths = [3, 1, 4, 2]
    em, _, mask = _batch(C, lengths, seed=10 + C)
    paths = crf.decode(em, mask)
    assert [len(p) for p in paths] == lengths
    for b, n in enumerate(lengths):
        best = max(itertools.product(range(C), repeat=n), key=lambda s: _score(crf, em[b], s))
        assert tuple(paths[b]) == best


def test_bio_transition_mask():
    allowed, start = bio_transition_mask(BIO)
    assert start.tolist() == [True, True, False, True, False]
    expected = torch.ones(5, 5, dtype=torch.bool)
    expected[:, 2] = torch.tensor([False, True, True, False, False])  # I-PER after B-PER / I-PER only
    expected[:, 4] = torch.tensor([False, False, False, True, True])  # I-LOC after B-LOC / I-LOC only
    assert torch.equal(allowed, expected)
    # string keys (config.json) are fine
    assert torch.equal(bio_transition_mask({str(k): v for k, v in BIO.items()})[0], expected)
    for bad in ["PER", "B-", "E-PER", "i-PER", ""]:
        with pytest.raises(ValueError, match=repr(bad)):
            bio_transition_mask({0: "O", 1: bad})
    with pytest.raises(ValueError, match="keys"):
        bio_transition_mask({0: "O", 2: "B-PER"})


def test_constrained_decode_is_legal_and_best_legal():
    allowed, start = bio_transition_mask(BIO)
    crf = _crf(5, seed=3, allowed_transitions=allowed, allowed_start=start)
    with torch.no_grad():  # the learned scores themselves favour illegal moves: only the constraints stop them
        crf.transitions[:, 2] += 5.0
        crf.transitions[:, 4] += 5.0
        crf.start_transitions[2] += 5.0
    g = torch.Generator().manual_seed(0)
    lengths = [4, 1, 3, 2, 4, 4]
    em = torch.randn(len(lengths), 4, 5, generator=g)
    em[..., 2] += 20.0  # strongly favour I-PER / I-LOC everywhere, first position included
    em[1::2, :, 4] += 25.0
    mask = torch.tensor([[1] * n + [0] * (4 - n) for n in lengths], dtype=torch.bool)
    paths = crf.decode(em, mask)
    for b, n in enumerate(lengths):
        assert _legal(paths[b], allowed, start), (b, paths[b])
        legal = [s for s in itertools.product(range(5), repeat=n) if _legal(s, allowed, start)]
        best = max(legal, key=lambda s: _score(crf, em[b], s))
        assert tuple(paths[b]) == best
        unconstrained = max(itertools.product(range(5), repeat=n), key=lambda s: _score(crf, em[b], s, False))
        assert not _legal(unconstrained, allowed, start)  # the constraints did change the answer


def test_constrained_likelihood_matches_brute_force():
    allowed, start = bio_transition_mask(BIO)
    crf = _crf(5, seed=4, allowed_transitions=allowed, allowed_start=start)
    em, _, mask = _batch(5, [3], seed=4)
    seqs = list(itertools.product(range(5), repeat=3))
    all_seqs = torch.tensor(seqs)
    ll = crf.log_likelihood(em.expand(len(seqs), 3, 5), all_seqs, mask.expand(len(seqs), 3))
    scores = torch.tensor([_score(crf, em[0], s) for s in seqs], dtype=torch.float64)
    assert torch.allclose(ll.double(), scores - torch.logsumexp(scores, 0), atol=1e-3)
    legal = torch.tensor([_legal(s, allowed, start) for s in seqs])
    assert ll[legal].exp().sum().item() == pytest.approx(1.0, abs=1e-5)
    assert (ll[~legal] < -1000).all() and torch.isfinite(ll).all()


def test_gradients_are_finite_with_constraints_and_padding():
    allowed, start = bio_transition_mask(BIO)
    crf = _crf(5, allowed_transitions=allowed, allowed_start=start)
    em, _, mask = _batch(5, [4, 2, 1], seed=1)
    em.requires_grad_(True)
    tags = torch.tensor([[1, 2, 2, 0], [3, 4, -100, -100], [0, -100, -100, -100]])
    loss = crf(em, tags, mask)
    loss.backward()
    for p in (crf.transitions, crf.start_transitions, crf.end_transitions, em):
        assert p.grad is not None and torch.isfinite(p.grad).all()
    assert crf.transitions.grad.abs().sum() > 0 and em.grad.abs().sum() > 0
    assert torch.all(em.grad[~mask] == 0)  # padding gets no gradient
    assert torch.all(crf.transitions.grad[~allowed] == 0)  # nor do the scores of disallowed moves
    # an illegal gold sequence is very unlikely, but its loss and gradients stay finite
    crf.zero_grad()
    illegal = crf(em.detach(), torch.tensor([[2, 4, 2, 0], [0, 2, 0, 0], [4, 0, 0, 0]]), mask)
    illegal.backward()
    assert illegal.item() > 1000 and torch.isfinite(crf.transitions.grad).all()


def test_masked_positions_do_not_change_the_result():
    crf = _crf(4, seed=5)
    em, tags, mask = _batch(4, [3, 2, 4], seed=5)
    ll = crf.log_likelihood(em, tags, mask)
    paths = crf.decode(em, mask)
    # alone and unpadded
    for b, n in enumerate([3, 2, 4]):
        one = crf.log_likelihood(em[b:b + 1, :n], tags[b:b + 1, :n], mask[b:b + 1, :n])
        assert one.item() == pytest.approx(ll[b].item(), abs=1e-5)
        assert crf.decode(em[b:b + 1, :n], mask[b:b + 1, :n]) == [paths[b]]
    # padded further with junk emissions (huge, inf, nan) and junk tags
    junk = torch.full((3, 3, 4), 1e6)
    junk[0, 0, 1], junk[1, 1, 2] = float("inf"), float("nan")
    em2 = torch.cat([em, junk], dim=1)
    mask2 = torch.cat([mask, torch.zeros(3, 3, dtype=torch.bool)], dim=1)
    tags2 = torch.cat([tags, torch.tensor([[7, -1, 99]] * 3)], dim=1)
    assert torch.allclose(crf.log_likelihood(em2, tags2, mask2), ll, atol=1e-5)
    assert crf.decode(em2, mask2) == paths
    # junk inside the original padding of row 1 too, and an int mask
    em3 = em2.clone()
    em3[1, 2:] = -1e6
    assert torch.allclose(crf.log_likelihood(em3, tags2, mask2.long()), ll, atol=1e-5)
    assert crf.decode(em3, mask2.int()) == paths


def test_bf16_emissions_are_computed_in_float32():
    crf = _crf(3)
    em, tags, mask = _batch(3, [4, 3])
    em16 = em.bfloat16()
    ll = crf.log_likelihood(em16, tags, mask)
    assert ll.dtype == torch.float32
    assert torch.allclose(ll, crf.log_likelihood(em16.float(), tags, mask))
    assert crf(em16, tags, mask).dtype == torch.float32
    assert crf.decode(em16, mask) == crf.decode(em16.float(), mask)


def test_bad_inputs_raise():
    crf = _crf(3)
    em, tags, mask = _batch(3, [3, 2])
    with pytest.raises(ValueError, match="row 1 is not left-aligned"):
        crf.log_likelihood(em, tags, torch.tensor([[1, 1, 1], [1, 0, 1]]))
    with pytest.raises(ValueError, match="row 0 is not left-aligned"):
        crf.decode(em, torch.tensor([[1, 0, 1], [1, 1, 0]]))
    with pytest.raises(ValueError, match="row 1 is empty"):
        crf.log_likelihood(em, tags, torch.tensor([[1, 1, 0], [0, 0, 0]]))
    with pytest.raises(ValueError, match="row 0 is empty"):
        crf.decode(em[:, :0], mask[:, :0])
    with pytest.raises(ValueError, match="only 0 and 1"):
        crf.decode(em, torch.tensor([[1, 2, 1], [1, 1, 0]]))
    with pytest.raises(ValueError, match="mask must be bool or integer"):
        crf.decode(em, mask.float())
    with pytest.raises(ValueError, match=r"emissions must have shape \(B, W, C\) with C = num_tags = 3"):
        crf.log_likelihood(em[..., :2], tags, mask)
    with pytest.raises(ValueError, match="emissions must have shape"):
        crf.decode(em[0], mask)
    with pytest.raises(ValueError, match="emissions must be a float tensor"):
        crf.decode(em.long(), mask)
    with pytest.raises(ValueError, match=r"mask must have the shape \(B, W\) = \(2, 3\)"):
        crf.log_likelihood(em, tags, mask[:, :2])
    with pytest.raises(ValueError, match=r"tags must have the shape \(B, W\) = \(2, 3\)"):
        crf.log_likelihood(em, tags[:1], mask)
    with pytest.raises(ValueError, match="tags must be an integer tensor"):
        crf.log_likelihood(em, tags.float(), mask)
    bad = tags.clone()
    bad[1, 1] = 3
    with pytest.raises(ValueError, match=r"tags\[1, 1\] = 3 is outside 0..2"):
        crf.log_likelihood(em, bad, mask)
    bad[1, 1] = -100
    with pytest.raises(ValueError, match=r"tags\[1, 1\] = -100"):
        crf(em, bad, mask)


def test_constructor_validation():
    for bad in [0, -1, 2.0, True, "3"]:
        with pytest.raises(ValueError, match="num_tags must be a positive integer"):
            LinearChainCRF(bad)
    with pytest.raises(ValueError, match=r"allowed_transitions must be a bool tensor of shape \(3, 3\)"):
        LinearChainCRF(3, allowed_transitions=torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="allowed_transitions must be a bool tensor"):
        LinearChainCRF(3, allowed_transitions=torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"allowed_start must be a bool tensor of shape \(3,\)"):
        LinearChainCRF(3, allowed_start=torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="length 1"):
        LinearChainCRF(3, allowed_start=torch.zeros(3, dtype=torch.bool))
    # tag 0 may start but leads nowhere: no legal sequence of length 2
    dead_end = torch.ones(2, 2, dtype=torch.bool)
    dead_end[0] = False
    with pytest.raises(ValueError, match="length 2"):
        LinearChainCRF(2, allowed_transitions=dead_end, allowed_start=torch.tensor([True, False]))
    # init: pytorch-crf's small uniform scores; no constraints means everything allowed
    crf = LinearChainCRF(4)
    for p in (crf.transitions, crf.start_transitions, crf.end_transitions):
        assert p.abs().max() <= 0.1
    assert crf.allowed_transitions.all() and crf.allowed_start.all()
    assert "constrained=False" in repr(crf)


def test_state_dict_round_trip_keeps_constraints():
    allowed, start = bio_transition_mask(BIO)
    crf = _crf(5, allowed_transitions=allowed, allowed_start=start)
    state = crf.state_dict()
    assert set(state) == {"transitions", "start_transitions", "end_transitions", "allowed_transitions",
                          "allowed_start"}
    fresh = LinearChainCRF(5)  # unconstrained until it loads the saved buffers
    fresh.load_state_dict(state)
    assert torch.equal(fresh.allowed_transitions, allowed) and torch.equal(fresh.allowed_start, start)
    assert "constrained=True" in repr(fresh)
    em = torch.randn(2, 4, 5)
    em[..., 2] += 20.0
    mask = torch.ones(2, 4, dtype=torch.bool)
    assert fresh.decode(em, mask) == crf.decode(em, mask)
    assert all(_legal(p, allowed, start) for p in fresh.decode(em, mask))


def test_learns_a_task_where_the_tag_depends_on_the_previous_tag():
    """Tokens a, s, w; tags O, B, I: s is B and a is O, but w is I after B or I and O after O, so the emissions
    alone (one score per token) cannot tell; the transitions must."""
    O, B, I = 0, 1, 2
    a, s = 0, 1  # token 2 is w

    def sample(n_seq, W, g):
        tokens = torch.randint(0, 3, (n_seq, W), generator=g)
        lengths = torch.randint(1, W + 1, (n_seq,), generator=g)
        mask = torch.arange(W) < lengths.unsqueeze(1)
        tags = torch.full((n_seq, W), -100)
        for r in range(n_seq):
            prev = O
            for c in range(int(lengths[r])):
                t = int(tokens[r, c])
                prev = B if t == s else O if t == a else (O if prev == O else I)
                tags[r, c] = prev
        return tokens, tags, mask

    g = torch.Generator().manual_seed(0)
    tokens, tags, mask = sample(64, 8, g)
    torch.manual_seed(0)
    emit = torch.nn.Embedding(3, 3)  # a linear layer on one-hot tokens
    crf = LinearChainCRF(3)
    opt = torch.optim.Adam([*emit.parameters(), *crf.parameters()], lr=0.1)
    for _ in range(150):  # 100% by ~40 steps; the rest drives the loss down
        opt.zero_grad()
        loss = crf(emit(tokens), tags, mask)
        loss.backward()
        opt.step()
    test_tokens, test_tags, test_mask = sample(200, 10, g)
    with torch.no_grad():
        paths = crf.decode(emit(test_tokens), test_mask)
    gold = [row[:len(p)] for row, p in zip(test_tags.tolist(), paths)]
    assert paths == gold
    assert loss.item() < 0.1
