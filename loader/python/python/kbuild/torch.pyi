from typing import Any, Callable, Optional, Sequence, Union

from . import Package

def register_op(
    pkg: Package,
    name: str,
    *,
    kernel: str,
    variant: Optional[str] = None,
    mutates_args: Union[str, Sequence[str]] = (),
    schema: Optional[str] = None,
    device_types: Union[str, Sequence[str]] = "cuda",
    fake: Optional[Callable[..., Any]] = None,
) -> Callable[[Callable[..., Any]], Any]: ...
