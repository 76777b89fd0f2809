"""Example entrypoint: a small MLP on scikit-learn's handwritten digits (8x8 images, 10 classes), CPU-fast.

Job spec: ``train.entrypoint: hpctrain.examples.digits:build``. Options (``train.options``):
``hidden`` (width, default 128), ``dropout`` (default 0.0), ``test_size`` (held-out fraction, 0.2).
"""

from __future__ import annotations

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import TensorDataset

from hpctrain.runtime.task import Task
from hpctrain.spec import Train

SPLIT_SEED = 1234  # the held-out set must not depend on the training seed


def load(test_size: float) -> tuple[TensorDataset, TensorDataset]:
    """Standardized 64-pixel features (statistics from the training split only), fixed split."""
    features, labels = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        features, labels, test_size=test_size, random_state=SPLIT_SEED, stratify=labels
    )
    mean = x_train.mean(axis=0)
    std = x_train.std(axis=0)
    std[std == 0] = 1.0  # border pixels that never light up in training stay as they are

    def tensors(x: object, y: object) -> TensorDataset:
        inputs = torch.tensor((x - mean) / std, dtype=torch.float32)  # type: ignore[operator]
        return TensorDataset(inputs, torch.tensor(y, dtype=torch.long))

    return tensors(x_train, y_train), tensors(x_test, y_test)


def correct(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return (outputs.argmax(dim=-1) == targets).sum()


def build(train: Train) -> Task:
    options = train.options
    hidden = int(options.get("hidden", 128))
    dropout = float(options.get("dropout", 0.0))
    train_data, eval_data = load(float(options.get("test_size", 0.2)))
    model = nn.Sequential(
        nn.Linear(64, hidden),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 10),
    )
    return Task(
        model=model,
        train_data=train_data,
        loss=nn.functional.cross_entropy,
        eval_data=eval_data,
        metric=correct,
    )
