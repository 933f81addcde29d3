"""What to watch (`Resource`) and how cached objects are keyed (`meta_namespace_key`)."""

from __future__ import annotations

from urllib.parse import quote

import attrs


def _check_segment(inst: object, attribute: attrs.Attribute, value: str) -> None:
    # A slash would silently change which URL we hit; fail at construction instead.
    if "/" in value:
        raise ValueError(f"Resource.{attribute.name} must not contain '/': {value!r}")


@attrs.frozen
class Resource:
    """One API resource (a group/version/plural), the unit an informer watches.

    * ``group``: API group, ``""`` for the core group (``/api/v1``).
    * ``version``: e.g. ``"v1"``, ``"v1alpha2"``.
    * ``plural``: the URL resource name, e.g. ``"configmaps"``, ``"vlans"``.
    * ``namespaced``: whether objects live in namespaces (decides the key shape
      and whether :meth:`path` accepts a namespace).
    * ``kind``: optional; used to fill ``kind`` on list items that lack it (list
      responses omit ``kind``/``apiVersion`` on items). When empty, the kind is
      derived from the list's ``kind`` (``"ConfigMapList"`` -> ``"ConfigMap"``).
    * ``metadata_only``: list and watch it as ``PartialObjectMetadata`` (client-go's
      metadata informer): the server sends metadata only, for a kind whose readers read
      nothing else (Nodes: their status is most of their size). The informer gives the
      objects this resource's ``kind`` and ``apiVersion`` back, so readers see the usual
      shape without ``spec`` and ``status``. Requires ``kind``.

    Frozen and hashable, so it can key the shared informer factory.
    """

    group: str = attrs.field(validator=_check_segment)
    version: str = attrs.field(validator=_check_segment)
    plural: str = attrs.field(validator=_check_segment)
    namespaced: bool
    kind: str = ""
    metadata_only: bool = attrs.field(default=False, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.metadata_only and not self.kind:
            raise ValueError(f"a metadata-only Resource needs its kind: {self.plural}")

    @property
    def api_version(self) -> str:
        """``"v1"`` for core, ``"group/version"`` otherwise (the objects' ``apiVersion``)."""
        return self.version if not self.group else f"{self.group}/{self.version}"

    def path(self, namespace: str | None = None) -> str:
        """URL path of the collection.

        ``namespace=None`` means all namespaces (or a cluster-scoped resource):
        ``/api/v1/configmaps``; with a namespace:
        ``/api/v1/namespaces/<ns>/configmaps``; non-core groups use
        ``/apis/<group>/<version>/...``.

        Raises ``ValueError`` for a namespace on a cluster-scoped resource.
        """
        prefix = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if namespace is None:
            return f"{prefix}/{self.plural}"
        if not self.namespaced:
            raise ValueError(f"{self.plural} is cluster-scoped; no namespace allowed")
        return f"{prefix}/namespaces/{quote(namespace, safe='')}/{self.plural}"

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}/{self.version}" if self.group else f"{self.plural}/{self.version}"


def meta_namespace_key(obj: dict) -> str:
    """The cache key of an object: ``"<namespace>/<name>"``, or ``"<name>"``
    when it has no namespace (cluster-scoped). Same rule as client-go's
    ``MetaNamespaceKeyFunc``.

    Raises ``KeyError``/``TypeError`` if ``obj`` has no ``metadata.name``.
    """
    meta = obj["metadata"]
    name = meta["name"]
    if not isinstance(name, str) or not name:
        raise KeyError("object has no metadata.name")
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else name


def split_meta_namespace_key(key: str) -> tuple[str | None, str]:
    """Inverse of :func:`meta_namespace_key`: ``"ns/name"`` -> ``("ns", "name")``,
    ``"name"`` -> ``(None, "name")``. Raises ``ValueError`` on more than one ``/``."""
    parts = key.split("/")
    if len(parts) == 1:
        return None, parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    raise ValueError(f"unexpected key format: {key!r}")
