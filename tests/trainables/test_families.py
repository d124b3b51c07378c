"""The encoder families of ``TrainConfig.encoder`` and multi-head attention: each forward
against an obviously correct reference, the config's refusals, and every family through
the same Trainer, checkpoint, resume, ensemble file and SentenceEncoder."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from trainables import checkpoint, names
from trainables.attention import MultiHeadVectorialAttention
from trainables.checkpoint import CheckpointError, EnsembleWeights, load_ensemble
from trainables.config import ConfigError, TrainConfig, applicable
from trainables.data import TrainingData, epoch_batches, partner_rows
from trainables.embedding import embed_sentences
from trainables.encoder import SentenceEncoder
from trainables.families import PRESETS, preset
from trainables.loop import Trainer
from trainables.metrics import retrieval_metrics
from trainables.model import CaptionEncoder, GroundedEncoder
from trainables.presets import family_of
from trainables.train import main
from trainables.vocabulary import UNKNOWN_INDEX, WordVocabulary, tokenize

CAPTIONS = ["A red circle.", "two blue squares left of a red circle", "", "a square!", "red"]
RUN = dict(batch_size=8, epochs=2, snapshot_interval=1, ensemble_size=2, device="cpu",
           semantic_every=0, threads=1)  # fmt: skip
FAMILIES = {
    "char_rnn": dict(hidden_size=8),
    "char_rnn_two_heads": dict(hidden_size=8, attention_heads=2, attention_penalty=0.1),
    "word_rnn": dict(encoder="word_rnn", hidden_size=8, word_embedding_dim=16),
    "word_rnn_lstm_three_heads": dict(encoder="word_rnn", rnn_type="lstm", hidden_size=8,
                                      word_embedding_dim=16, attention_heads=3,
                                      attention_penalty=0.5),
    "word_bow": dict(encoder="word_bow", word_embedding_dim=16, loss="pearson"),
    "word_bow_mean_hinge": dict(encoder="word_bow", word_embedding_dim=16, bow_pooling="mean"),
    "vete_rnn": dict(encoder="vete_rnn", hidden_size=8, word_embedding_dim=16, rnn_layers=2,
                     loss="pearson"),
    "cap2img": dict(encoder="cap2img", rnn_type="lstm", hidden_size=8, word_embedding_dim=16,
                    dropout=0.5),
    "char_rnn_text_only": dict(hidden_size=8, pairing="caption"),
    "cap2img_text_only": dict(encoder="cap2img", hidden_size=8, word_embedding_dim=16,
                              pairing="caption"),
}  # fmt: skip
TIMING = ("time/", names.CAPTIONS_PER_S)


@pytest.fixture(scope="module")
def data(tiny_world: Path) -> TrainingData:
    return TrainingData.from_store(str(tiny_world))


def _encoded(vocabulary: WordVocabulary, captions: list[str]) -> tuple[torch.Tensor, ...]:
    ids, lengths = vocabulary.encode(captions)
    return torch.from_numpy(ids), torch.from_numpy(lengths)


# -- each forward against a reference ----------------------------------------------


@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_bag_of_words_is_the_normalised_sum_or_mean_of_its_words(pooling: str) -> None:
    torch.manual_seed(0)
    vocabulary = WordVocabulary.build(CAPTIONS, min_count=2)
    config = TrainConfig(encoder="word_bow", word_embedding_dim=6, bow_pooling=pooling)
    model = GroundedEncoder(config, 4, vocabulary)
    got = model.caption_encoder(*_encoded(vocabulary, CAPTIONS))
    table = model.caption_encoder.embedding.table.weight
    for i, caption in enumerate(CAPTIONS):  # the reference: one caption, no padding
        rows = [vocabulary.index(t) for t in tokenize(caption)] or [UNKNOWN_INDEX]
        vector = sum(table[r] for r in rows)
        if pooling == "mean":
            vector = vector / len(rows)
        torch.testing.assert_close(got[i], vector / vector.norm())
    assert got.shape == (len(CAPTIONS), 6) and model.image_encoder.linear.out_features == 6


def test_bag_of_words_sum_and_mean_are_the_same_after_normalisation() -> None:
    vocabulary = WordVocabulary.build(CAPTIONS)
    embedded = []
    for pooling in ("sum", "mean"):
        torch.manual_seed(0)
        config = TrainConfig(encoder="word_bow", word_embedding_dim=6, bow_pooling=pooling)
        embedded.append(GroundedEncoder(config, 4, vocabulary).caption_encoder)
    encoded = _encoded(vocabulary, CAPTIONS)
    torch.testing.assert_close(embedded[0](*encoded), embedded[1](*encoded))


def _reference_heads(
    attention: MultiHeadVectorialAttention, states: torch.Tensor, lengths: list[int]
) -> tuple[torch.Tensor, list[list[torch.Tensor]]]:
    """Each caption alone, only its own steps: per head ``softmax_t(V tanh(W h_t))``,
    ``sum_t a_t * h_t``; the heads concatenated. Also each head's weights per caption."""
    pooled, weights = [], []
    for b, n in enumerate(lengths):
        h = states[b, :n]
        per_head = [torch.softmax(head.out(torch.tanh(head.hidden(h))), dim=0)
                    for head in attention.heads]  # fmt: skip
        weights.append(per_head)
        pooled.append(torch.cat([(a * h).sum(dim=0) for a in per_head]))
    return torch.stack(pooled), weights


def _reference_penalty(attention, weights, embedding) -> torch.Tensor:
    """The authors' attention_loss (margin 1) over head pairs, the attention term as the
    mean over captions (with one caption: exactly theirs, which took the first)."""
    total = torch.zeros(())
    heads = len(attention.heads)
    dim = embedding.shape[1] // heads
    for x, y in itertools.combinations(range(heads), 2):
        w = attention.heads[x].hidden.weight - attention.heads[y].hidden.weight
        total = total + torch.relu(1 - w.norm())
        gaps = [torch.relu(1 - (per[x] - per[y]).norm()) for per in weights]
        total = total + sum(gaps) / len(gaps)
        e = embedding[:, x * dim : (x + 1) * dim] - embedding[:, y * dim : (y + 1) * dim]
        total = total + torch.relu(1 - e.norm())
    return total


@pytest.mark.parametrize("shared", [False, True])
def test_multi_head_attention_masks_concatenates_and_penalises(shared: bool) -> None:
    torch.manual_seed(0)
    attention = MultiHeadVectorialAttention(dim=6, hidden=5, heads=3)
    if shared:  # two identical heads: every term of their pair is 1 (distance 0)
        attention.heads[1].load_state_dict(attention.heads[0].state_dict())
    lengths = [7, 3, 1, 5]
    states = torch.randn(4, 7, 6)
    mask = torch.arange(7) < torch.tensor(lengths)[:, None]
    states = states.masked_fill(~mask[..., None], 99.0)  # padding must not matter
    pooled, weights = attention.pool(states, mask)
    expected, reference_weights = _reference_heads(attention, states, lengths)
    torch.testing.assert_close(pooled, expected)
    torch.testing.assert_close(attention(states, mask), expected)
    for b, n in enumerate(lengths):
        assert all(w[b, n:].eq(0).all() for w in weights)
    embedding = torch.nn.functional.normalize(pooled, dim=-1)
    penalty = attention.penalty(weights, embedding)
    torch.testing.assert_close(penalty, _reference_penalty(attention, reference_weights, embedding))
    if shared:
        assert penalty >= 3.0
    penalty.backward()
    assert attention.heads[2].hidden.weight.grad is not None


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
@pytest.mark.parametrize("pooling", ["attention", "max"])
def test_word_rnn_is_the_char_rnn_over_word_embeddings(rnn_type: str, pooling: str) -> None:
    torch.manual_seed(0)
    vocabulary = WordVocabulary.build(CAPTIONS)
    config = TrainConfig(
        encoder="word_rnn", hidden_size=5, word_embedding_dim=7, rnn_type=rnn_type, pooling=pooling
    )
    encoder = GroundedEncoder(config, 4, vocabulary).caption_encoder
    assert type(encoder) is CaptionEncoder and encoder.rnn.input_size == 7
    ids, lengths = _encoded(vocabulary, CAPTIONS)
    training = encoder(ids, lengths)  # grad enabled on a CPU: the hand-written recurrence
    with torch.inference_mode():
        inference = encoder(ids, lengths)  # nn.GRU / nn.LSTM
    with torch.no_grad():
        for i, n in enumerate(lengths.tolist()):  # each caption alone, no padding
            h = encoder.rnn(encoder.embedding.table.weight[ids[i, :n]][None])[0][0]
            if pooling == "attention":
                a = torch.softmax(encoder.attention.out(torch.tanh(encoder.attention.hidden(h))), 0)
                pooled = (a * h).sum(dim=0)
            else:
                pooled = h.amax(dim=0)
            expected = pooled / pooled.norm()
            torch.testing.assert_close(training[i].detach(), expected, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(inference[i], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_cap2img_is_the_max_of_the_bilstm_final_states_projected_to_the_features(
    rnn_type: str,
) -> None:
    torch.manual_seed(0)
    vocabulary = WordVocabulary.build(CAPTIONS)
    config = TrainConfig(encoder="cap2img", hidden_size=5, word_embedding_dim=7,
                         rnn_type=rnn_type, dropout=0.5)  # fmt: skip
    model = GroundedEncoder(config, 9, vocabulary).eval()  # eval: dropout off
    encoder = model.caption_encoder
    ids, lengths = _encoded(vocabulary, CAPTIONS)
    joint, sentence = encoder(ids, lengths), encoder.sentence(ids, lengths)
    features = torch.randn(3, 9)
    torch.testing.assert_close(
        model.image_encoder(features), features / features.norm(dim=1)[:, None]
    )
    rnn, table = encoder.rnn, encoder.embedding.table.weight
    with torch.no_grad():
        for i, n in enumerate(lengths.tolist()):  # each caption alone, read both ways
            out = rnn(table[ids[i, :n]][None])[0][0]  # (n, 2 x 5): forward, backward
            h = torch.maximum(out[-1, :5], out[0, 5:])  # each direction's last step
            torch.testing.assert_close(sentence[i], h / h.norm(), rtol=1e-5, atol=1e-6)
            p = torch.nn.functional.elu(encoder.projection(h))
            torch.testing.assert_close(joint[i], p / p.norm(), rtol=1e-5, atol=1e-6)
    assert joint.shape == (len(CAPTIONS), 9) and sentence.shape == (len(CAPTIONS), 5)
    assert model.joint_dim == 9 and model.embedding_dim == config.embedding_dim == 5
    assert not list(model.image_encoder.parameters())
    for gate in rnn.weight_hh_l0.split(5):  # orthogonal recurrent blocks (Saxe et al.)
        torch.testing.assert_close(gate @ gate.T, torch.eye(5), atol=1e-5, rtol=0)


def test_cap2img_dropout_acts_in_training_only() -> None:
    torch.manual_seed(0)
    vocabulary = WordVocabulary.build(CAPTIONS)
    config = TrainConfig(encoder="cap2img", hidden_size=16, word_embedding_dim=4, dropout=0.5)
    encoder = GroundedEncoder(config, 9, vocabulary).caption_encoder
    ids, lengths = _encoded(vocabulary, CAPTIONS)
    assert not torch.equal(encoder.train()(ids, lengths), encoder(ids, lengths))
    torch.testing.assert_close(encoder.eval()(ids, lengths), encoder(ids, lengths))


@pytest.mark.parametrize(("rnn_type", "layers"), [("gru", 1), ("lstm", 3)])
def test_vete_rnn_is_the_last_layers_final_state(rnn_type: str, layers: int) -> None:
    torch.manual_seed(0)
    vocabulary = WordVocabulary.build(CAPTIONS)
    config = TrainConfig(encoder="vete_rnn", hidden_size=6, word_embedding_dim=5,
                         rnn_type=rnn_type, rnn_layers=layers)  # fmt: skip
    model = GroundedEncoder(config, 4, vocabulary)
    encoder = model.caption_encoder
    ids, lengths = _encoded(vocabulary, CAPTIONS)
    got = encoder(ids, lengths)
    torch.testing.assert_close(encoder.sentence(ids, lengths), got)
    with torch.no_grad():
        for i, n in enumerate(lengths.tolist()):  # each caption alone: the top layer's last step
            h = encoder.rnn(encoder.embedding.table.weight[ids[i, :n]][None])[0][0, -1]
            torch.testing.assert_close(got[i], h / h.norm(), rtol=1e-5, atol=1e-6)
    assert not encoder.rnn.bidirectional and encoder.rnn.num_layers == layers
    assert model.image_encoder.linear.out_features == got.shape[1] == 6


def test_the_text_only_control_pairs_each_caption_with_the_next_of_its_image(
    data: TrainingData,
) -> None:
    rows = np.array([0, 4, 5, 9, 13, 599])
    np.testing.assert_array_equal(partner_rows(rows), [1, 0, 6, 5, 14, 595])
    assert torch.equal(partner_rows(torch.from_numpy(rows)), torch.from_numpy(partner_rows(rows)))
    config = TrainConfig(**{**RUN, "epochs": 1}, hidden_size=8, pairing="caption")
    trainer = Trainer(config, data)
    image_side = [p.detach().clone() for p in trainer.model.image_encoder.parameters()]
    caption_side = [p.detach().clone() for p in trainer.model.caption_encoder.parameters()]
    trainer.train_one_epoch()
    after = list(trainer.model.image_encoder.parameters())
    assert all(torch.equal(a, b) for a, b in zip(after, image_side, strict=True))  # no image
    moved = zip(trainer.model.caption_encoder.parameters(), caption_side, strict=True)
    assert any(not torch.equal(a, b) for a, b in moved)
    # a step's loss is the hinge between two captions of each image, recomputed here
    plan = epoch_batches(data.train.num_images, 8, 0, 5)[:1]
    split, encoder = trainer.train_split, trainer.model.caption_encoder
    with torch.no_grad():
        a = encoder(split.tokens[plan[0]].long(), split.lengths[plan[0]])
        partner = partner_rows(plan[0])
        b = encoder(split.tokens[partner].long(), split.lengths[partner])
    got = trainer.train_batches(plan)[0]  # the loss before the step's update
    torch.testing.assert_close(got, trainer.loss_fn(b, a), rtol=1e-5, atol=1e-4)


def test_one_head_is_the_papers_model_and_heads_widen_both_embeddings() -> None:
    one = GroundedEncoder(TrainConfig(hidden_size=4), 10)
    assert "caption_encoder.attention.hidden.weight" in one.state_dict()
    three = GroundedEncoder(TrainConfig(hidden_size=4, attention_heads=3), 10)
    assert three.embedding_dim == TrainConfig(hidden_size=4, attention_heads=3).embedding_dim == 24
    assert three.image_encoder.linear.out_features == 24
    assert "caption_encoder.attention.heads.2.out.weight" in three.state_dict()
    chars = torch.tensor([[5, 6, 7], [8, 0, 0]])
    _, captions, penalty = three.forward_with_penalty(
        torch.randn(2, 10), chars, torch.tensor([3, 1])
    )
    assert captions.shape == (2, 24) and penalty.ndim == 0 and penalty >= 0
    *_, none = one.forward_with_penalty(torch.randn(2, 10), chars, torch.tensor([3, 1]))
    assert none == 0


# -- the config ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"encoder": "word_bow", "pooling": "max"},
         r"^pooling: does not apply to encoder word_bow \(only to char_rnn, word_rnn\)"),
        ({"encoder": "word_bow", "hidden_size": 64}, r"^hidden_size: does not apply to encoder"),
        ({"encoder": "word_bow", "attention_heads": 2}, r"^attention_heads: does not apply to "
                                                        r"encoder word_bow"),
        ({"encoder": "word_rnn", "char_embedding_dim": 10}, r"^char_embedding_dim: does not "
                                                            r"apply to encoder word_rnn"),
        ({"encoder": "word_rnn", "bow_pooling": "mean"}, r"^bow_pooling: does not apply to "
                                                         r"encoder word_rnn \(only to word_bow\)"),
        ({"word_embedding_dim": 128}, r"^word_embedding_dim: does not apply to encoder char_rnn"),
        ({"word_vectors": "glove.txt"}, r"^word_vectors: does not apply to encoder char_rnn"),
        ({"vocab_min_count": 1}, r"^vocab_min_count: does not apply to encoder char_rnn"),
        ({"pooling": "max", "attention_heads": 2}, r"^attention_heads: does not apply to pooling"),
        ({"attention_penalty": 0.5}, r"^attention_penalty: got 0.5, but it does not apply to "
                                     r"attention_heads 1"),
        ({"encoder": "word_rnn", "word_vectors_update": "frozen_map"},
         r"^word_vectors_update: frozen_map .* set word_vectors"),
        ({"encoder": "word_rnn", "word_vectors": " glove.txt"}, r"^word_vectors: got ' glove"),
        ({"encoder": "transformer"}, r"^encoder: got 'transformer', expected one of char_rnn, "
                                     r"word_rnn, word_bow, vete_rnn, cap2img"),
        ({"encoder": "word_rnn", "rnn_layers": 2}, r"^rnn_layers: does not apply to encoder "
                                                   r"word_rnn \(only to vete_rnn\)"),
        ({"encoder": "vete_rnn", "pooling": "max"}, r"^pooling: does not apply to encoder "
                                                    r"vete_rnn"),
        ({"encoder": "cap2img", "attention_heads": 2}, r"^attention_heads: does not apply to "
                                                       r"encoder cap2img"),
        ({"encoder": "cap2img", "clip_image": 0.1}, r"^clip_image: does not apply to encoder "
                                                    r"cap2img"),
        ({"encoder": "word_bow", "dropout": 0.5}, r"^dropout: does not apply to encoder word_bow"),
        ({"dropout": 0.5}, r"^dropout: does not apply to encoder char_rnn"),
        ({"encoder": "cap2img", "dropout": 1.0}, r"^dropout: got 1.0, expected a number in"),
        ({"encoder": "cap2img", "dropout": -0.1}, r"^dropout: got -0.1"),
        ({"encoder": "cap2img", "dropout": "nan"}, r"^dropout: got nan"),
        ({"encoder": "vete_rnn", "rnn_layers": 0}, r"^rnn_layers: got 0, expected an integer"),
        ({"pairing": "images"}, r"^pairing: got 'images', expected one of image, caption"),
        ({"attention_heads": 0}, r"^attention_heads: got 0, expected an integer from 1"),
        ({"attention_heads": 2, "attention_penalty": -1}, r"^attention_penalty: got -1"),
        ({"encoder": "word_bow", "vocab_min_count": 0}, r"^vocab_min_count: got 0"),
        ({"encoder": "word_bow", "vocab_max_size": -1}, r"^vocab_max_size: got -1"),
    ],
)  # fmt: skip
def test_fields_of_another_family_are_refused_naming_both(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        TrainConfig.from_dict(values)
    assert caught.value.field == next(
        name for name in TrainConfig.field_names() if str(caught.value).startswith(f"{name}:")
    )


def test_each_familys_fields_at_their_defaults_and_a_saved_config_are_accepted() -> None:
    bow = TrainConfig.from_dict({"encoder": "word_bow", "hidden_size": 1024, "rnn_type": "gru"})
    assert bow.embedding_dim == bow.word_embedding_dim == 300
    assert TrainConfig.from_dict(bow.to_dict()) == bow
    assert TrainConfig(hidden_size=16, attention_heads=2).embedding_dim == 64
    for name in PRESETS:
        config = preset(name)
        assert name.startswith(config.encoder)
        assert TrainConfig.from_dict(config.to_dict()) == config
    assert preset("word_bow").embedding_dim == 128 and preset("word_bow").loss == "pearson"
    assert preset("vete_rnn").embedding_dim == 128 and preset("vete_rnn").rnn_layers == 2
    cap2img = preset("cap2img")
    assert (cap2img.hidden_size, cap2img.word_embedding_dim, cap2img.dropout) == (1024, 300, 0.5)
    assert cap2img.embedding_dim == 1024 and cap2img.rnn_type == "lstm"
    assert preset("char_rnn") == TrainConfig()
    assert preset("char_rnn_text").pairing == "caption"
    with pytest.raises(ValueError, match="preset: got 'cnn'"):
        preset("cnn")


def test_family_of_names_each_preset_whatever_its_size_and_as_mlflow_strings() -> None:
    for name in PRESETS:
        changes = {"hidden_size": 64, "lr_max": 2e-3, "margin": 0.3}
        config = preset(name, **applicable(changes, PRESETS[name].get("encoder", "char_rnn")))
        assert family_of(config.to_dict()) == name
        as_logged = {k: str(v) for k, v in config.to_dict().items()}  # MLflow params
        assert family_of(as_logged) == name
    assert family_of(preset("word_rnn", attention_heads=4).to_dict()) == "word_rnn_heads4"
    both = preset("char_rnn", attention_heads=3, pairing="caption")
    assert family_of(both.to_dict()) == "char_rnn_heads3_text"
    assert family_of({}) == "char_rnn"  # runs logged before the families existed


# -- every family through the same paths ------------------------------------------------


def _without_timing(report: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in report.items() if not k.startswith(TIMING)}


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_trains_resumes_and_encodes_raw_text(
    data: TrainingData, family: str, tmp_path: Path
) -> None:
    config = TrainConfig(**RUN, **FAMILIES[family])
    trainer, straight, saved = Trainer(config, data), [], b""
    for report in trainer.run():
        straight.append(report)
        if report["epoch"] == 1.0:  # checkpointed after its report, as a trial is
            saved = trainer.save_checkpoint()  # before another Trainer reseeds torch's generator
    assert [int(r["epoch"]) for r in straight] == [0, 1, 2]
    assert all(math.isfinite(v) for r in straight for v in r.values())
    assert (names.ATTENTION_PENALTY in straight[1]) == (config.attention_penalty > 0)
    # stopped after epoch 1 (its checkpoint then) and resumed from it: the same numbers
    resumed = Trainer(config, data)
    resumed.load_checkpoint(saved)
    rest = list(resumed.run())
    assert [_without_timing(r) for r in rest] == [_without_timing(r) for r in straight[2:]]
    # the ensemble file, used from raw text, reproduces the reported test metrics
    path = EnsembleWeights.from_training_state(resumed.state_dict()).save(tmp_path / "e.pt")
    encoder = SentenceEncoder.load(path, device="cpu")
    images = encoder.encode_images(data.test.features, normalize=False)
    captions = encoder.encode(list(data.test.captions), normalize=False, space="joint")
    for key, value in retrieval_metrics(images, captions).items():
        assert value == pytest.approx(straight[-1][names.key(names.ENSEMBLE, key)], abs=1e-6)
    assert encoder.embedding_dim == config.embedding_dim == encoder.encode(CAPTIONS).shape[1]
    joint = data.feature_dim if config.encoder == "cap2img" else config.embedding_dim
    assert captions.shape[1] == images.shape[1] == joint


@pytest.fixture(scope="module")
def word_trainer(data: TrainingData) -> Trainer:
    trainer = Trainer(TrainConfig(**{**RUN, **FAMILIES["word_rnn"]}), data)
    list(trainer.run())
    return trainer


def test_a_word_model_keeps_its_vocabulary_in_both_files(
    word_trainer: Trainer, data: TrainingData
) -> None:
    vocabulary = word_trainer.tokenizer
    assert isinstance(vocabulary, WordVocabulary) and len(vocabulary) > 10
    assert vocabulary == WordVocabulary.build(
        data.train.captions, min_count=5
    )  # the training captions only, at the config's minimum count
    state = checkpoint.load_training_state(word_trainer.save_checkpoint())
    assert state["schema_version"] == checkpoint.SCHEMA_VERSION == 2
    assert state["vocabulary"] == vocabulary.to_state() and state["alphabet"] == ""
    ensemble = load_ensemble(
        checkpoint.to_bytes(EnsembleWeights.from_training_state(state).to_dict())
    )
    assert ensemble.tokenizer() == vocabulary
    models = ensemble.models()
    assert models[0].caption_encoder.tokenizer is models[1].caption_encoder.tokenizer
    sentences = ["a red circle", "an unseen zebra"]
    torch.testing.assert_close(  # embed_sentences reads each model's own vocabulary
        embed_sentences(models, sentences),
        embed_sentences(models, sentences, encoding=vocabulary),
    )


def test_files_without_what_their_family_needs_are_refused(
    word_trainer: Trainer, data: TrainingData
) -> None:
    state = word_trainer.state_dict()
    ensemble = EnsembleWeights.from_training_state(state).to_dict()
    no_vocabulary = checkpoint.to_bytes({**ensemble, "vocabulary": None})
    with pytest.raises(CheckpointError, match=r"e\.pt: a word_rnn model without its vocabulary"):
        load_ensemble(no_vocabulary, what="e.pt")
    foreign = {**ensemble["vocabulary"], "pattern": r"\S+"}
    with pytest.raises(CheckpointError, match="tokenised by the rule"):
        load_ensemble(checkpoint.to_bytes({**ensemble, "vocabulary": foreign}))
    other = Trainer(word_trainer.config, data)
    with pytest.raises(CheckpointError, match="the checkpoint: a word_rnn model without its"):
        other.load_state_dict({**state, "vocabulary": None})


def test_a_version_1_file_reads_as_a_character_model(data: TrainingData) -> None:
    trainer = Trainer(TrainConfig(**{**RUN, "hidden_size": 4, "epochs": 1}), data)
    list(trainer.run())
    ensemble = EnsembleWeights.from_training_state(trainer.state_dict()).to_dict()
    old = {k: v for k, v in ensemble.items() if k != "vocabulary"}
    old["schema_version"] = 1
    old["config"] = {k: v for k, v in old["config"].items() if k in ("hidden_size", "seed")}
    weights = load_ensemble(checkpoint.to_bytes(old))
    assert weights.config.encoder == "char_rnn" and weights.vocabulary is None
    encoder = SentenceEncoder(weights, device="cpu")
    np.testing.assert_array_equal(
        encoder.encode(CAPTIONS),
        SentenceEncoder(
            EnsembleWeights.from_training_state(trainer.state_dict()), device="cpu"
        ).encode(CAPTIONS),
    )
    state = {k: v for k, v in trainer.state_dict().items() if k != "vocabulary"}
    state["schema_version"] = 1
    resumed = Trainer(trainer.config, data)
    resumed.load_checkpoint(checkpoint.to_bytes(state))
    assert resumed.epoch == 1 and resumed.tokenizer.size == 102


def test_a_resumed_word_model_uses_its_saved_vocabulary(
    word_trainer: Trainer, data: TrainingData
) -> None:
    """The store's training captions changed since (a new word is frequent now): the
    resumed run keeps the vocabulary, the embedding table and the encoding it had."""
    train = data.train
    changed = dataclasses.replace(
        train, captions=np.array([f"{c} zebra" for c in train.captions], dtype=object)
    )
    other_data = dataclasses.replace(data, train=changed)
    resumed = Trainer(word_trainer.config.replace(epochs=3), other_data)
    assert resumed.tokenizer != word_trainer.tokenizer  # built from the new captions
    resumed.load_checkpoint(word_trainer.save_checkpoint())
    assert resumed.tokenizer == word_trainer.tokenizer
    table = resumed.model.caption_encoder.embedding.table.weight
    assert table.shape[0] == word_trainer.tokenizer.size
    expected, _ = word_trainer.tokenizer.encode(list(changed.captions))
    assert np.array_equal(resumed.train_split.tokens.numpy()[:, : expected.shape[1]], expected)
    last = list(resumed.run())[-1]
    assert last["epoch"] == 3 and math.isfinite(last[names.LOSS])


def _glove_file(path: Path, vocabulary: WordVocabulary, dim: int) -> Path:
    rng = np.random.default_rng(0)
    lines = [f"{len(vocabulary) + 1} {dim}", f"zebra {' '.join(['0.5'] * dim)}"]
    for word in vocabulary.words[::2]:  # every other word has a vector
        lines.append(" ".join([word, *(f"{x:.5f}" for x in rng.normal(size=dim))]))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("update", ["learned", "frozen_map"])
def test_glove_vectors_initialise_the_known_words(
    data: TrainingData, tmp_path: Path, update: str
) -> None:
    vocabulary = WordVocabulary.build(data.train.captions, min_count=5)
    path = _glove_file(tmp_path / "glove.txt", vocabulary, 8)
    config = TrainConfig(**{**RUN, "epochs": 1}, encoder="word_bow", word_embedding_dim=8,
                         word_vectors=str(path), word_vectors_update=update)  # fmt: skip
    trainer = Trainer(config, data)
    embedding = trainer.model.caption_encoder.embedding
    table = embedding.table.weight.detach().clone()
    for line in path.read_text().splitlines()[2:]:
        word, *numbers = line.split(" ")
        np.testing.assert_allclose(table[vocabulary.index(word)], np.float32(numbers), rtol=1e-6)
    assert table[0].eq(0).all()  # padding
    assert (embedding.map is not None) == (update == "frozen_map")
    start_map = None if embedding.map is None else embedding.map.weight.detach().clone()
    trainer.train_one_epoch()
    after = embedding.table.weight.detach()
    if update == "frozen_map":
        assert torch.equal(after, table) and not embedding.table.weight.requires_grad
        assert not torch.equal(embedding.map.weight.detach(), start_map)
    else:
        assert not torch.equal(after, table)


# -- the command line ------------------------------------------------------------------


def test_cli_help_lists_the_families_and_their_choices(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for option in ("--encoder char_rnn|word_rnn|word_bow", "--bow-pooling sum|mean",
                   "--word-vectors-update learned|frozen_map", "--word-vectors PATH",
                   "--attention-heads INT", "--attention-penalty FLOAT"):  # fmt: skip
        assert option in text, option


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--encoder", "word_bow", "--pooling", "max"],
         "error: --pooling: does not apply to encoder word_bow (only to char_rnn, word_rnn)"),
        (["--encoder", "word_rnn", "--word-vectors", "missing.txt"],
         "error: --word-vectors: missing.txt: cannot be read (No such file or directory)"),
    ],
)  # fmt: skip
def test_cli_refuses_with_one_line(tiny_world: Path, capsys, extra: list[str], expected: str):
    code = main(["--data", str(tiny_world), "--device", "cpu", "--epochs", "1", *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith(expected), err
    assert sum(e.startswith("error:") for e in err) == 1


@pytest.mark.slow
def test_cli_trains_a_bag_of_words_with_the_semantic_battery(tiny_world: Path, capsys) -> None:
    argv = ["--data", str(tiny_world), "--encoder", "word_bow", "--word-embedding-dim", "16",
            "--loss", "pearson", "--batch-size", "8", "--epochs", "2", "--device", "cpu",
            "--threads", "1", "--json"]  # fmt: skip
    assert main(argv) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["epoch"] for line in lines] == [0, 1, 2]
    final = lines[-1]
    assert final[names.LOSS] < lines[1][names.LOSS]
    for name in (names.PRIMARY_SEMANTIC, names.key(names.ENSEMBLE, "semantic"), names.FINISHED):
        assert final[name] is not None and math.isfinite(final[name]), name
