"""Type checks of configured arguments: a gin binding of the wrong type fails early, named.

gin passes bound values as they are parsed (`num_steps = 'five'` is a str), so an entry point
checks its own arguments before any expensive work:

  def train(num_steps: int = 50_000, ...):
    typecheck.arguments(train, locals())
"""
from collections.abc import Callable
import math
import types
import typing
from typing import Any


def matches(value: Any, annotation: Any) -> bool:
  """Whether `value` fits `annotation`; annotations other than int, float, bool, str, None,
  unions, tuple[...] and dict[...] of them are not checked."""
  if annotation is bool:
    return isinstance(value, bool)
  if annotation is int:
    return isinstance(value, int) and not isinstance(value, bool)
  if annotation is float:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
  if annotation is str:
    return isinstance(value, str)
  if annotation is type(None):
    return value is None
  origin, args = typing.get_origin(annotation), typing.get_args(annotation)
  if origin in (typing.Union, types.UnionType):
    return any(matches(value, a) for a in args)
  if origin is tuple:
    items = args[:1] * len(value) if args[1:] == (...,) else args
    return (isinstance(value, (tuple, list)) and len(items) == len(value) and
            all(matches(v, a) for v, a in zip(value, items)))
  if origin is dict:
    return isinstance(value, dict) and all(
        matches(k, args[0]) and matches(v, args[1]) for k, v in value.items())
  return True


class BindingError(TypeError, ValueError):
  """A configured value of the wrong type: a TypeError, and a ValueError, which the tools refuse
  as bad input (`cli.run`: one line, exit status 2) rather than report as a bug."""


def arguments(fn: Callable[..., Any], values: dict[str, Any]) -> None:
  """Raises BindingError (a TypeError) naming the first of `fn`'s arguments whose value does not
  fit its annotation (as `module.function.argument`, how gin names it)."""
  hints = typing.get_type_hints(fn)
  for name, value in values.items():
    if name in hints and not matches(value, hints[name]):
      qualname = fn.__qualname__.removesuffix(".__init__")
      where = f"{fn.__module__.rsplit('.', 1)[-1]}.{qualname}.{name}"
      raise BindingError(f"{where} = {value!r}: expected {_name(hints[name])}, got "
                         f"{type(value).__name__}; check its gin binding.")


def in_range(where: str, value: Any, fits: bool, expected: str) -> None:
  """Raises BindingError naming the binding `where` (as gin names it) unless `value` `fits` (a
  range test, False for a value of the wrong type) and, being a number, is finite."""
  if not (fits and math.isfinite(value)):
    raise BindingError(f"{where} = {value!r}: expected {expected}; check its gin binding.")


def _name(annotation: Any) -> str:
  return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")
