"""``{{ value|shown }}``: text from ZooKeeper (a foreign node's name, a path, node data) as the admin shows it, with
the characters that would make it pose as other text (controls, bidi controls, line separators) visibly escaped
(names.shown). HTML escaping still follows, as for any variable."""

from django import template

from ..names import shown as shown_name

register = template.Library()


@register.filter
def shown(value: object) -> str:
    return shown_name("" if value is None else str(value))
