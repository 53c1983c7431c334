"""A YAML loader that refuses a key written twice in one mapping, for front matter and configs.

PyYAML keeps the last of a repeated key's values, silently: a config's second `resources:`
section dropped the whole first one, a page's second `title:` the first. The YAML spec, js-yaml
and Go's yaml refuse it. The check is made on each mapping as it is composed, before `<<` merges
are applied: checked on the constructed mapping, a merged mapping that an alias used again held its
merged keys twice ("found 'k' a second time" for valid YAML). A key written after a merge
overrides the merged value and is no repeat; a second `<<` in one mapping is one (the last
merge's keys won, unsaid).
"""

from __future__ import annotations

import yaml


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader with a ConstructorError at a key written twice in one mapping, naming
    where it was first (`first_line`: the number of the YAML's first line in its file)."""

    first_line = 1

    def compose_mapping_node(self, anchor: str | None) -> yaml.MappingNode:
        """The mapping's node, once no key of it is written twice."""
        node = super().compose_mapping_node(anchor)
        first: dict[tuple[str, str], yaml.Node] = {}
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode):
                seen = first.setdefault((key.tag, key.value), key)
                if seen is not key:
                    line = seen.start_mark.line + self.first_line
                    problem = f"key {key.value!r} written twice (first at line {line})"
                    raise yaml.constructor.ConstructorError(None, None, problem, key.start_mark)
        return node
