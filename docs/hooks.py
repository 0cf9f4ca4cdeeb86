"""mkdocs hook: the pages' generated parts (config reference, fault catalogue, built-ins)
are made from the code when the site is built (``drillbit.docgen``)."""
from drillbit.docgen import fill


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 (mkdocs' hook signature)
    return fill(markdown)
