"""What a storage holds for a spec, read without writing anything (``ablate plan``, the results
API and ``ablate status`` on a store that may not exist yet): the store's URL if there is one,
each item's state, what other studies hold for the unfinished items, and the study's orphans.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import optuna

from ablate.design import Item
from ablate.runner import queue
from ablate.runner.housekeeping import Orphans, orphans
from ablate.runner.items import DROPPED, states_by_item
from ablate.runner.reuse import Reuse, find_reusable
from ablate.runner.study import recorded_tracking, storage
from ablate.stores import resolve, sqlite_path


def existing_store_url(storage_url: str | None) -> str | None:
    """The storage URL to read (``ablate.stores.resolve``'s, creating nothing), or None when there
    is no store yet: a SQLite URL whose file does not exist."""
    url = resolve(storage_url, create=False).storage
    if url.startswith("sqlite:///"):
        path = sqlite_path(url)
        return url if path is not None and path.is_file() else None
    return url


def item_states(study_name: str, keys: list[str], storage_url: str | None) -> dict[str, str] | None:
    """State per item key (done, failed, running, waiting, new), or None when the study has no
    store or no study of that name. Opens an existing store only; raises StorageError."""
    url = existing_store_url(storage_url)
    if url is None:
        return None
    try:
        opt = optuna.load_study(study_name=study_name, storage=storage(url, read_only=True))
    except KeyError:
        return None
    states = states_by_item(opt)
    return {k: states.get(k, "new") for k in keys}


@dataclass
class Standing:
    """What a storage holds for a spec's items, read without writing (``ablate plan``)."""

    stored: bool  # a study of the spec's name exists
    states: dict[str, str] = field(default_factory=dict)  # item key → state in this study
    linked: dict[str, str] = field(default_factory=dict)  # item key → the study it was reused from
    reuse: Reuse = field(default_factory=Reuse)  # what other studies hold for the unfinished items
    orphans: Orphans | None = None


def standing(study_name: str, items: Sequence[Item], storage_url: str | None,
             tracking_uri: str | None, reuse: bool = True) -> Standing | None:
    """The state of each item, what other studies hold for the unfinished ones, and the study's
    orphans; None when there is no store yet. Opens an existing store only; raises StorageError."""
    url = existing_store_url(storage_url)
    if url is None:
        return None
    store = storage(url)
    try:
        opt: optuna.Study | None = optuna.load_study(study_name=study_name, storage=store)
    except KeyError:
        opt = None
    out = Standing(opt is not None)
    if opt is not None:
        tracking_uri = recorded_tracking(opt, tracking_uri)
        states = states_by_item(opt)
        out.states = {i.key: states.get(i.key, "new") for i in items}
        for entry in queue.entries(opt, None, ("item", "reused_from", DROPPED)):
            origin = entry.user_attrs.get("reused_from")
            if isinstance(origin, dict) and not entry.user_attrs.get(DROPPED):
                out.linked[str(entry.user_attrs.get("item"))] = str(origin.get("study"))
        out.orphans = orphans(opt, items)
    else:
        out.states = {i.key: "new" for i in items}
    new = [i for i in items if out.states[i.key] == "new"]
    if reuse and new:
        out.reuse = find_reusable(store, study_name, tracking_uri, new)
    return out
