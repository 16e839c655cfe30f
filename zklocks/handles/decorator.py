"""Lock handles as decorators: the name template checked at decoration, filled from each call's arguments."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .. import conf, names
from ..exceptions import InvalidLockName

if TYPE_CHECKING:
    from .base import BaseHandle

F = TypeVar("F", bound=Callable[..., Any])


def decorate(handle: BaseHandle, func: F) -> F:
    """``handle`` as a decorator of ``func``: each call holds a copy of it, named from the template and the
    call's arguments if the name has fields."""
    template = handle.name
    where = f"{func.__module__}.{func.__qualname__}"
    owner = f"{func.__qualname__}{names.signature(func)}"
    # Mistakes in the template are caught when decorating (at import time), not at the first call.
    try:
        templated = bool(names.template_fields(template))
    except ValueError as exc:
        raise InvalidLockName(f"{where}: lock name template {template!r} {exc}") from None
    missing = names.missing_fields(template, func)
    if missing:
        raise InvalidLockName(
            f"{where}: lock name template {template!r} refers to "
            f"{', '.join(map(repr, missing))}, which is not an argument of {owner}"
        )
    conf.declare_alias(handle.using, where)

    def handle_for(args: tuple, kwargs: dict) -> BaseHandle:
        if not templated:
            return handle._clone(template)
        try:
            arguments = names.bind_arguments(func, args, kwargs)
        except TypeError as exc:
            raise TypeError(f"{where}: {exc}") from None
        return handle._clone(
            names.render_template(template, arguments, what=where, label="lock name template", owner=owner)
        )

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args, **kwargs):
            async with handle_for(args, kwargs):
                return await func(*args, **kwargs)

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with handle_for(args, kwargs):
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
