"""Typed models of every file kit writes into a bundle (the bundle's format, shared by the rooms that
write a file and the rooms that read it). Each module holds the models of one kind of file; the
generated ``bundle.schema.json`` is made from them."""

from kit.plumbing.jsontypes import Json, JsonObject

__all__ = ["Json", "JsonObject"]
