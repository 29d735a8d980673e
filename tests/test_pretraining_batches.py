"""The resumable batch sources: exact resume, settings checks, epochs, ranks, several languages, a real slice."""

import io

import numpy as np
import pytest
import torch

from ctxemb.modeling.loading import load_tokenizer
from ctxemb.tasks.pretraining.batches import MultilingualBatches, PretrainingBatches
from ctxemb.tasks.pretraining.shards import build_token_shards
from tests.helpers import write_token_corpus


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, tok):
    return write_token_corpus(tmp_path_factory.mktemp("corpus"), tok)


def _epoch(source, epoch=0):
    return [x for w in range(source.n_windows) for x in source.window_instances(epoch, w)]



def _take(it, k):
    return [next(it) for _ in range(k)]



# ---- the batch source -----------------------------------------------------------------------------------------
class _TestMasker:
    """A small stand-in with the Masker protocol: masks 20% of the real tokens from the generator it is given."""

    def __init__(self, mask_id, with_generator=True):
        self.mask_id = mask_id
        if not with_generator:
            self.__call__ = None

    def __call__(self, input_ids, *, attention_mask=None, word_ids=None, generator=None):
        chosen = (torch.rand(input_ids.shape, generator=generator) < 0.2) & (word_ids >= 0)
        labels = torch.where(chosen, input_ids, torch.full_like(input_ids, -100))
        return type("M", (), dict(input_ids=input_ids.masked_fill(chosen, self.mask_id), labels=labels,
                                  span_left=None))()


def _global_rng_masker(mask_id):
    def masker(input_ids, attention_mask=None, word_ids=None):  # no generator: uses torch's global RNG
        chosen = (torch.rand(input_ids.shape) < 0.2) & (word_ids >= 0)
        return type("M", (), dict(input_ids=input_ids.masked_fill(chosen, mask_id),
                                  labels=torch.where(chosen, input_ids, -100)))()
    return masker


@pytest.mark.parametrize("objective", ["nsp", "full_sentences", "doc_sentences"])
@pytest.mark.parametrize("generator", [True, False])
def test_exact_resume(corpus, objective, generator):
    _, sh = corpus
    masker = _TestMasker(sh.mask_token_id) if generator else _global_rng_masker(sh.mask_token_id)
    make = lambda: PretrainingBatches(sh, objective=objective, max_len=64, batch_size=16, seed=11,  # noqa: E731
                                      masker=masker, shuffle_window=9)
    a = make()
    reference = _take(iter(a), 14)
    assert a.epoch >= 1  # the run crosses window and epoch ends
    b = make()
    it = iter(b)
    _take(it, 6)
    buf = io.BytesIO()
    torch.save(b.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    torch.manual_seed(12345)  # the global RNG must not matter
    c = make()
    c.load_state_dict(state)
    resumed = _take(iter(c), 8)
    for ref, got in zip(reference[6:], resumed):
        assert ref.keys() == got.keys() and "labels" in got
        for k in ref:
            torch.testing.assert_close(ref[k], got[k], rtol=0, atol=0)
    assert (resumed[0]["input_ids"] == sh.mask_token_id).any()
    # another seed gives other batches
    other = PretrainingBatches(sh, objective=objective, max_len=64, batch_size=16, seed=12, shuffle_window=9)
    assert not torch.equal(next(iter(other))["input_ids"][:, :8], reference[0]["input_ids"][:, :8])


def test_state_from_other_settings_is_refused(corpus):
    _, sh = corpus
    a = PretrainingBatches(sh, objective="doc_sentences", max_len=64, batch_size=8)
    b = PretrainingBatches(sh, objective="doc_sentences", max_len=64, batch_size=4)
    with pytest.raises(ValueError, match=r"batch_size \(saved 8, now 4\)"):
        b.load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="objective"):
        PretrainingBatches(sh, objective="mlm", max_len=64, batch_size=8)


def test_epochs_reshuffle(corpus):
    _, sh = corpus
    src = PretrainingBatches(sh, objective="doc_sentences", max_len=48, batch_size=4, shuffle_window=8)
    order0 = [x.origin["pieces"][0] for x in _epoch(src, 0)]
    order1 = [x.origin["pieces"][0] for x in _epoch(src, 1)]
    assert order0 != order1 and sorted(order0) == sorted(order1)
    # one_epoch: every sequence of the epoch once, the last batch short, the position untouched
    batches = list(src.one_epoch(0))
    assert sum(len(b["input_ids"]) for b in batches) == len(order0) and len(batches[-1]["input_ids"]) <= 4
    assert (src.epoch, src.window, src.offset, src.batches) == (0, 0, 0, 0)


@pytest.mark.parametrize("objective", ["nsp", "full_sentences"])
def test_ranks_get_disjoint_documents(corpus, objective):
    _, sh = corpus
    seen = []
    for rank in range(3):
        src = PretrainingBatches(sh, objective=objective, max_len=48, batch_size=4, rank=rank, world_size=3)
        docs = set()
        for x in _epoch(src):
            if objective == "nsp":
                docs |= {x.origin["a"][0], x.origin["b"][0]}
            else:
                docs |= {d for d, _, _ in x.origin["pieces"]}
        assert docs <= set(src.view.documents.tolist())
        seen.append(docs)
    assert not (seen[0] & seen[1]) and not (seen[0] & seen[2]) and not (seen[1] & seen[2])
    assert set().union(*seen) == set(range(sh.n_documents))


def test_multilingual_batches_resume(corpus):
    _, sh = corpus
    make = lambda: MultilingualBatches(  # noqa: E731
        [PretrainingBatches(sh, objective="doc_sentences", max_len=32, batch_size=2, seed=s) for s in (1, 2)],
        sizes=[1000, 10], alpha=0.3, seed=4)
    ref = _take(iter(make()), 10)
    b = make()
    _take(iter(b), 4)
    c = make()
    c.load_state_dict(b.state_dict())
    for r, g in zip(ref[4:], _take(iter(c), 6)):
        assert torch.equal(r["input_ids"], g["input_ids"])


# ---- a real slice ---------------------------------------------------------------------------------------------
def test_real_corpus_slice(shared_data, tmp_path, tok):
    src = shared_data / "corpora"
    de = (src / "fortunes-multilingual" / "de.txt").read_text(encoding="utf-8").splitlines()[:400]
    wiki = (src / "wikitext-2" / "valid.txt").read_text(encoding="utf-8").splitlines()[:120]
    (tmp_path / "de.txt").write_text("\n".join(de) + "\n", encoding="utf-8")
    (tmp_path / "wiki.txt").write_text("\n".join(wiki) + "\n", encoding="utf-8")
    sh = build_token_shards([tmp_path / "de.txt", tmp_path / "wiki.txt"], tok, tmp_path / "s")
    lines = [x.strip() for x in de + wiki if x.strip()]
    assert sh.n_sentences == len(lines)
    flat = np.concatenate([sh.document(d).tokens for d in range(sh.n_documents)])
    assert flat.tolist() == [i for item in tok.tokenize(lines) for i in item.ids]
    try:
        from ctxemb.tasks.pretraining.masking import Masker, MaskingConfig

        masker = Masker(MaskingConfig(strategy="span"), vocab_size=sh.vocab_size, mask_token_id=sh.mask_token_id,
                        special_token_ids=sh.special_token_ids, replacement_weights=sh.unigram_counts)
    except ImportError:  # the masking module is not there: batches without labels
        masker = None
    for objective in ("nsp", "full_sentences", "doc_sentences"):
        b = next(iter(PretrainingBatches(sh, objective=objective, max_len=128, batch_size=8, masker=masker)))
        assert b["input_ids"].shape[0] == 8 and b["input_ids"].shape[1] <= 128
        if masker is not None:
            assert (b["labels"] != -100).any() and "span_left" in b
