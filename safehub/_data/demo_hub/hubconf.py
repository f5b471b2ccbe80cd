"""A tiny torch.hub repo that `safehub demo` serves from a loopback GitHub stand-in."""

dependencies = ["torch"]


def tiny_mlp(width: int = 8, pretrained: bool = False):  # type: ignore[no-untyped-def]
    """A two-layer perceptron; pretrained weights are not shipped with the demo."""
    import torch

    if pretrained:
        raise ValueError("the demo has no pretrained weights")
    return torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 2)
    )
