"""Built-in models: torchvision's image classifiers and a BERT-Base-shaped encoder.

Every model is built with random weights (``weights=None``): an inventory needs shapes, FLOPs and the
gradient order, never trained values, and nothing is downloaded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping

import torch
from torch import nn

from commsched.errors import CommschedError
from commsched.models.inventory import sum_of_means
from commsched.models.names import ZOO_MODELS
from commsched.types import MAX_BATCH_SIZE, MAX_IMAGE_SIZE, MAX_INPUT_BYTES, shown

DEFAULT_IMAGE_SIZE = 224
INCEPTION_IMAGE_SIZE = 299
BERT_SEQ_LEN = 128
BERT_VOCAB_SIZE = 30522
BERT_MAX_POSITIONS = 512
BERT_HIDDEN = 768
TOKEN_MODELS = ("bert_base", "bert_small")
BERT_SMALL_VOCAB = 8192


class BertBase(nn.Module):
    """A BERT-Base-shaped encoder with a sequence-classification head.

    Token embedding 30522x768, learned position embedding 512x768, LayerNorm, 12 post-norm
    Transformer encoder layers (768 wide, 12 heads, 3072 GELU feed-forward), a tanh pooler on token 0
    and a 2-way classifier. BERT's 2x768 token-type embedding is left out: it adds 1,536 parameters
    and no FLOPs that matter for communication scheduling.
    """

    def __init__(
        self,
        num_layers: int = 12,
        num_classes: int = 2,
        hidden: int = BERT_HIDDEN,
        heads: int = 12,
        feed_forward: int = 3072,
        vocab: int = BERT_VOCAB_SIZE,
    ) -> None:
        super().__init__()
        self.vocab = vocab
        self.token_embedding = nn.Embedding(vocab, hidden)
        self.position_embedding = nn.Embedding(BERT_MAX_POSITIONS, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.dropout = nn.Dropout(0.1)
        layer = nn.TransformerEncoderLayer(
            d_model=hidden,
            nhead=heads,
            dim_feedforward=feed_forward,
            dropout=0.1,
            activation="gelu",
            batch_first=True,
        )
        # Nested tensors only matter for padded inference; off keeps training on the plain path.
        self.encoder = nn.TransformerEncoder(layer, num_layers=num_layers, enable_nested_tensor=False)
        self.pooler = nn.Linear(hidden, hidden)
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(token_ids.shape[1], device=token_ids.device)
        x = self.token_embedding(token_ids) + self.position_embedding(positions).unsqueeze(0)
        x = self.dropout(self.norm(x))
        x = self.encoder(x)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return self.classifier(pooled)


class VGG16LayerReplacement(nn.Module):
    """VGG-16 with OSF's layer replacement (Liu et al., Section 4.1, Table 3).

    The convolutional features of torchvision's VGG-16 are kept; its three fully connected layers
    (4096, 4096, 1000 wide: 392, 64 and 15.6 MB of parameters) are replaced by a 1x1 convolution
    of 512 channels (1 MB), a ReLU, a 1x1 convolution of 1000 channels (1.95 MB) and global
    average pooling (no parameters), in the network-in-network manner the paper cites.
    """

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.features = _torchvision_models().vgg16(weights=None).features
        self.head = nn.Sequential(
            nn.Conv2d(512, 512, kernel_size=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(512, num_classes, kernel_size=1),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _torchvision_models():
    """``torchvision.models``, imported on first use: the BERT models need no torchvision (the machine
    ``make gpu-check`` runs on may lack it); without it, building an image model is a CommschedError."""
    try:
        import torchvision
    except ImportError as e:
        why = str(e)

        class Missing:
            def __getattr__(self, model: str):
                raise CommschedError(f"zoo model {model!r} needs torchvision, which cannot be imported ({why})")

        return Missing()
    return torchvision.models


def _builders() -> Mapping[str, Callable[[], nn.Module]]:
    tv = _torchvision_models()
    return {
        "resnet18": lambda: tv.resnet18(weights=None),
        "resnet50": lambda: tv.resnet50(weights=None),
        "resnet101": lambda: tv.resnet101(weights=None),
        "resnet152": lambda: tv.resnet152(weights=None),
        "vgg16": lambda: tv.vgg16(weights=None),
        "vgg19": lambda: tv.vgg19(weights=None),
        "vgg16_nin": VGG16LayerReplacement,
        "alexnet": lambda: tv.alexnet(weights=None),
        # init_weights=True skips torchvision's warning about its (slow) default init changing;
        # aux_logits stays at the default (True) so training mode returns the auxiliary heads.
        "googlenet": lambda: tv.googlenet(weights=None, init_weights=True),
        "densenet121": lambda: tv.densenet121(weights=None),
        "densenet161": lambda: tv.densenet161(weights=None),
        "densenet201": lambda: tv.densenet201(weights=None),
        "inception_v3": lambda: tv.inception_v3(weights=None, init_weights=True),
        "mobilenet_v2": lambda: tv.mobilenet_v2(weights=None),
        "convnext_tiny": lambda: tv.convnext_tiny(weights=None),
        "efficientnet_b0": lambda: tv.efficientnet_b0(weights=None),
        "swin_t": lambda: tv.swin_t(weights=None),
        "vit_b_16": lambda: tv.vit_b_16(weights=None),
        "bert_base": BertBase,
        # The same shape, CPU-sized: 4 layers of 256 wide, 4 heads, 1024 feed-forward, 8192 tokens.
        "bert_small": lambda: BertBase(num_layers=4, hidden=256, heads=4, feed_forward=1024, vocab=BERT_SMALL_VOCAB),
    }


def _check_name(name: str) -> str:
    if name not in ZOO_MODELS:
        raise CommschedError(f"unknown zoo model {name!r}; choose from {', '.join(ZOO_MODELS)}")
    return name


def build_model(name: str) -> nn.Module:
    """A fresh, randomly initialised zoo model (uses torch's global RNG, like any nn.Module)."""
    return _builders()[_check_name(name)]()


def default_image_size(name: str) -> int | None:
    """224 for image models, 299 for inception_v3 (its auxiliary head needs a 17x17 grid), None for BERT."""
    _check_name(name)
    if name in TOKEN_MODELS:
        return None
    return INCEPTION_IMAGE_SIZE if name == "inception_v3" else DEFAULT_IMAGE_SIZE


def example_input(name: str, batch_size: int, image_size: int | None = None) -> tuple[torch.Tensor, ...]:
    """Positional inputs for one forward of ``batch_size`` samples, drawn from a generator seeded with 0.

    Images are (batch, 3, image_size, image_size) float32; bert_base takes int64 token ids of shape
    (batch, 128) and rejects ``image_size``. The batch is at most
    :data:`~commsched.types.MAX_BATCH_SIZE`, the image side at most
    :data:`~commsched.types.MAX_IMAGE_SIZE` and the input tensor at most
    :data:`~commsched.types.MAX_INPUT_BYTES`; an input that the machine cannot allocate within those
    bounds is a CommschedError too.
    """
    _check_name(name)
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
        raise CommschedError(f"batch_size must be a positive integer, got {shown(batch_size)}")
    if batch_size > MAX_BATCH_SIZE:
        raise CommschedError(f"batch_size must be at most 2**24 samples, got {shown(batch_size)}")
    generator = torch.Generator().manual_seed(0)
    if name in TOKEN_MODELS:
        if image_size is not None:
            raise CommschedError(f"{name} takes token ids, not images; got image_size={shown(image_size)}")
        vocab = BERT_VOCAB_SIZE if name == "bert_base" else BERT_SMALL_VOCAB
        shape, nbytes = (batch_size, BERT_SEQ_LEN), batch_size * BERT_SEQ_LEN * 8
        _check_input_bytes(name, shape, nbytes)
        with _allocating(name, shape, nbytes):
            return (torch.randint(0, vocab, shape, generator=generator),)
    if image_size is None:
        image_size = default_image_size(name)
    if not isinstance(image_size, int) or isinstance(image_size, bool) or image_size <= 0:
        raise CommschedError(f"image_size must be a positive integer, got {shown(image_size)}")
    if image_size > MAX_IMAGE_SIZE:
        raise CommschedError(f"image_size must be at most {MAX_IMAGE_SIZE} pixels, got {shown(image_size)}")
    shape4, nbytes = (batch_size, 3, image_size, image_size), batch_size * 3 * image_size * image_size * 4
    _check_input_bytes(name, shape4, nbytes)
    with _allocating(name, shape4, nbytes):
        return (torch.randn(*shape4, generator=generator),)


def _check_input_bytes(name: str, shape: tuple[int, ...], nbytes: int) -> None:
    if nbytes > MAX_INPUT_BYTES:
        raise CommschedError(
            f"zoo model {name!r}: an input of shape {'x'.join(map(str, shape))} takes {nbytes / 2**30:.3g} GiB, "
            f"over the bound of {MAX_INPUT_BYTES / 2**30:g} GiB for one input; use a smaller batch or image size"
        )


@contextlib.contextmanager
def _allocating(name: str, shape: tuple[int, ...], nbytes: int) -> Iterator[None]:
    """torch's allocator failure (RuntimeError, or MemoryError) as a CommschedError naming the input."""
    try:
        yield
    except (RuntimeError, MemoryError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CommschedError(
            f"zoo model {name!r}: cannot allocate an input of shape {'x'.join(map(str, shape))} "
            f"({nbytes / 2**30:.3g} GiB): {first}"
        ) from None


@contextlib.contextmanager
def runs_on(name: str, inputs: tuple[torch.Tensor, ...]) -> Iterator[None]:
    """Turn torch's error for a zoo model that cannot take these inputs (an image too small for its
    pooling, say) into a CommschedError naming the model and the input shape."""
    try:
        yield
    except CommschedError:
        raise  # already says what was wrong (a CommschedError is a ValueError)
    except Exception as e:  # noqa: BLE001 - torchvision asserts, too (vit_b_16's image size): name it all
        shape = "x".join(str(d) for d in inputs[0].shape) if inputs else "no input"
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        kind = "" if isinstance(e, RuntimeError | ValueError) else f"{type(e).__name__}: "
        raise CommschedError(f"zoo model {name!r} cannot train on an input of shape {shape}: {kind}{first}".rstrip(": ")) from e


def training_loss(name: str, output: object) -> torch.Tensor:
    """A scalar that depends on every tensor output: sum of their means.

    Only the gradient order and shapes matter to an inventory, not the value, so a cheap stand-in for
    cross-entropy suffices; auxiliary heads (googlenet, inception_v3 in training mode) are included
    so their parameters receive gradients as in real training.
    """
    _check_name(name)
    return sum_of_means(output)
