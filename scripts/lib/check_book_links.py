#!/usr/bin/env python3
"""Checks the links of a built mdBook (standard library only).

Usage: check_book_links.py BUILD_DIR

Every relative href or src in every HTML page must name a file inside the
built book, and every #fragment must name an id (or an <a name>) in the page
it points to. Absolute URLs (http:, https:, mailto:...) are not fetched. An
`{{#include ...}}` or `{{#rustdoc_include ...}}` left in a page (its file was
missing) is an error too. Prints each broken link with the page it is on;
exits 1 when there is any.
"""
import html.parser
import os
import sys
import urllib.parse


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.links = []  # (attribute value, line)
        self.text = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for name in ("id", "name") if tag == "a" else ("id",):
            if attrs.get(name):
                self.ids.add(attrs[name])
        for name in ("href", "src"):
            value = attrs.get(name)
            if value is not None and tag in ("a", "img", "link", "script", "source", "video", "audio", "iframe"):
                self.links.append((value, self.getpos()[0]))

    def handle_data(self, data):
        self.text.append(data)


def parse(path):
    page = Page()
    with open(path, encoding="utf-8") as f:
        page.feed(f.read())
    return page


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = os.path.realpath(sys.argv[1])
    pages = {}
    for directory, _, files in os.walk(root):
        for name in files:
            if name.endswith(".html"):
                path = os.path.join(directory, name)
                pages[path] = parse(path)
    if not pages:
        print(f"no HTML pages under {root}: build the book first", file=sys.stderr)
        return 2
    errors = []
    checked = 0
    for path, page in sorted(pages.items()):
        rel = os.path.relpath(path, root)
        body = "".join(page.text)
        for directive in ("{{#include", "{{#rustdoc_include", "{{#playground"):
            if directive in body:
                errors.append(f"{rel}: an unresolved {directive} ...}}}} (its file is missing)")
        for value, line in page.links:
            url = urllib.parse.urlsplit(value)
            if url.scheme or value.startswith("//"):
                continue
            checked += 1
            target_path = urllib.parse.unquote(url.path)
            if target_path:
                target = os.path.realpath(os.path.join(os.path.dirname(path), target_path))
                if os.path.isdir(target):
                    target = os.path.join(target, "index.html")
            else:
                target = path
            if not (target == root or target.startswith(root + os.sep)):
                errors.append(f"{rel}:{line}: {value}: points outside the book")
                continue
            if not os.path.isfile(target):
                errors.append(f"{rel}:{line}: {value}: no such file in the book")
                continue
            fragment = urllib.parse.unquote(url.fragment)
            if fragment and target.endswith(".html"):
                ids = pages[target].ids if target in pages else parse(target).ids
                if fragment not in ids:
                    errors.append(f"{rel}:{line}: {value}: no #{fragment} in {os.path.relpath(target, root)}")
    for error in errors:
        print(error)
    print(f"{len(pages)} pages, {checked} relative links checked, {len(errors)} broken", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
