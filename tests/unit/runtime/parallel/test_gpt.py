"""The GPT example's pieces without a process group: sizes, data, stage splits and the pruned stage view."""

from __future__ import annotations

import pytest
import torch

from hpctrain.examples import gpt
from hpctrain.runtime.parallel.pp import union_view


def tiny() -> gpt.GPT:
    torch.manual_seed(0)
    return gpt.GPT(gpt.PRESETS["tiny"])


def test_param_count_matches_the_model_and_1b_is_about_a_billion() -> None:
    for cfg in (gpt.PRESETS["tiny"], gpt.config_from_options({"size": "tiny", "tied": True})):
        assert gpt.param_count(cfg) == sum(p.numel() for p in gpt.GPT(cfg).parameters())
    assert 0.9e9 < gpt.param_count(gpt.PRESETS["1b"]) < 1.2e9


def test_options_override_presets_and_unknown_ones_are_refused() -> None:
    cfg = gpt.config_from_options({"size": "small", "n_layers": 2})
    assert (cfg.d_model, cfg.n_layers) == (512, 2)
    with pytest.raises(ValueError, match="unknown options"):
        gpt.config_from_options({"layers": 2})
    with pytest.raises(ValueError, match="size"):
        gpt.config_from_options({"size": "huge"})


def test_corpus_is_deterministic_shifted_and_follows_the_chain() -> None:
    cfg = gpt.PRESETS["tiny"]
    a, b = gpt.markov_corpus(cfg, 8, seed=1), gpt.markov_corpus(cfg, 8, seed=1)
    x, y = a[:]
    assert torch.equal(x, b[:][0]) and x.shape == (8, cfg.seq_len)
    assert torch.equal(x[:, 1:], y[:, :-1])
    # Every token is followed by one of at most 4 successors.
    pairs = torch.stack([x.flatten(), y.flatten()], 1).unique(dim=0)
    assert int(torch.bincount(pairs[:, 0]).max()) <= 4


def test_stages_cover_the_blocks_once_with_original_names() -> None:
    model = tiny()
    names = {name for name, _ in model.named_parameters()}
    parts = [gpt.pipeline_split(model, stage, 3) for stage in range(3)]
    keys = [set(dict(part.named_parameters())) for part in parts]
    assert set().union(*keys) == names and sum(map(len, keys)) == len(names)
    assert "tok_emb.weight" in keys[0] and "head.weight" in keys[2]
    assert [list(p.blocks) for p in parts] == [["0", "1"], ["2"], ["3"]]
    # Stages share the model's parameters: composing them is the model.
    x = torch.randint(64, (2, 8))
    hidden = x
    for part in parts:
        hidden = part(hidden)
    torch.testing.assert_close(hidden, model(x))


def test_union_view_keeps_exactly_the_parts_under_original_names() -> None:
    model = tiny()
    parts = [gpt.pipeline_split(model, stage, 4) for stage in (0, 2)]
    view = union_view(model, parts)
    expected = {n for part in parts for n, _ in part.named_parameters()}
    assert set(dict(view.named_parameters())) == expected
    assert set(view.state_dict()) == {k for part in parts for k in part.state_dict()}
    assert len(model.blocks) == 4  # the original is untouched


def test_pipeline_refuses_too_many_stages_and_tied_heads() -> None:
    with pytest.raises(ValueError, match="stages"):
        gpt.pipeline_split(tiny(), 0, 5)
    tied = gpt.GPT(gpt.config_from_options({"tied": True}))
    with pytest.raises(ValueError, match="tied"):
        gpt.pipeline_split(tied, 0, 2)


def test_build_fills_the_task_hooks() -> None:
    from hpctrain.spec import Train

    task = gpt.build(Train(entrypoint="hpctrain.examples.gpt:build", options={"size": "tiny"}))
    assert task.tokens_per_sample == 32 and task.flops_per_token and task.flops_per_token > 6 * 50_000
    assert task.pipeline_split and task.tensor_parallel_plan and task.shard_units
    assert len(task.shard_units(task.model)) == 4
    x, y = task.train_data[:4]
    loss = task.loss(task.model(x), y).detach()
    assert abs(loss.item() - torch.log(torch.tensor(64.0)).item()) < 0.3  # starts near ln(vocab)
