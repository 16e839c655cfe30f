"""``{{ value|shown }}``: text from ZooKeeper (a foreign node's name, a path, node data) as the admin shows it, with
the characters that would make it pose as other text (controls, bidi controls, line separators) visibly escaped, as
the commands show it (ops.render.clean). HTML escaping still follows, as for any variable."""

from django import template

from ..ops.render import clean

register = template.Library()
register.filter("shown", clean)
