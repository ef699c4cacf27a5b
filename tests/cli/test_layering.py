#!/usr/bin/env python3
"""The layering check: no part links a part above it.

Reads the layer table of docs/architecture.md ("| 2 | `model/` | ..." rows,
several parts to a row allowed) and the build's part_links.txt (each
target's direct link libraries, written by cmake/part_links.cmake), and
fails, naming the link, when
  - a part library (tutti_PART) links a part of a higher layer;
  - a part library has no row in the table;
  - the whole link closure of serving, the gateway, the client or the
    tutti-serve / tutti-gateway programs holds a training part.
The apps' own libraries (tutti_cli*, tutti_shell_parts) and programs sit
in the apps row. --self-test checks that a planted upward link is caught.
"""
import re
import sys

TRAINING = {"tutti_train"}
NO_TRAINING = ["tutti_serve", "tutti_gateway", "tutti_client", "tutti-serve",
               "tutti-gateway"]
PROGRAMS = {"tutti", "tuttid", "tutti-serve", "tutti-gateway"}


def read_layers(text):
    layers = {}
    for line in text.splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|(.*?)\|", line)
        if not m:
            continue
        for part in re.findall(r"`([a-z_]+)/`", m.group(2)):
            layers[part] = int(m.group(1))
    return layers


def read_links(text):
    links = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        target, deps = line.split(":", 1)
        links[target.strip()] = deps.split()
    return links


def part_of(target):
    if target in PROGRAMS or target.startswith("tutti_cli") \
            or target == "tutti_shell_parts":
        return "apps"
    if target.startswith("tutti_"):
        return target[len("tutti_"):]
    return None  # a third-party library


def check(layers, links):
    errors = []
    for target, deps in sorted(links.items()):
        part = part_of(target)
        if part not in layers:
            errors.append(f"{target}: part {part}/ has no row in the layer "
                          "table of docs/architecture.md")
            continue
        for dep in deps:
            dep_part = part_of(dep)
            if dep_part is None or dep_part not in layers:
                continue
            if layers[dep_part] > layers[part]:
                errors.append(
                    f"{target} (layer {layers[part]}) links {dep} (layer "
                    f"{layers[dep_part]}): a part may not link a part "
                    "above it")
    for root in NO_TRAINING:
        if root not in links:
            continue
        seen, todo = set(), [root]
        while todo:
            t = todo.pop()
            for dep in links.get(t, []):
                if dep in TRAINING:
                    errors.append(f"{root} links training ({dep}) through "
                                  f"{t}")
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
    return errors


def self_test(layers):
    planted = {"tutti_kernels": ["tutti_base", "tutti_serve"],
               "tutti_serve": ["tutti_runtime"],
               "tutti_runtime": ["tutti_train"]}
    errors = check(layers, planted)
    want = ["tutti_kernels (layer", "tutti_serve links training"]
    missing = [w for w in want if not any(e.startswith(w) for e in errors)]
    if missing:
        print("self-test: the check missed " + ", ".join(missing))
        return 1
    print("self-test: the planted links are refused")
    return 0


def main(argv):
    table, links_file = argv[1], argv[2]
    with open(table) as f:
        layers = read_layers(f.read())
    if len(argv) > 3 and argv[3] == "--self-test":
        return self_test(layers)
    with open(links_file) as f:
        links = read_links(f.read())
    errors = check(layers, links)
    for e in errors:
        print(e)
    if not errors:
        print(f"layering: {len(links)} targets, every link goes down or "
              "across; serving, the gateway and the client link no training")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
