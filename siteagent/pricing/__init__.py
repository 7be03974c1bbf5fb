"""Pricing policies: what a reservation costs, by load and by the delay it imposes.

A site's :class:`Pricing` composes a unit-price policy (``FlatPrice``, ``LoadBasedPrice``)
with a fee policy (``NoFee``, ``ExternalityFee``); ``quote.py`` answers the query forms and
``choose`` is the buyer's trade-off between fee and start time.
"""

from siteagent.pricing.base import Context, Price, Refused, Window
from siteagent.pricing.externality import ExternalityFee
from siteagent.pricing.flat import FlatPrice, NoFee
from siteagent.pricing.load import LoadBasedPrice
from siteagent.pricing.site_pricing import Pricing, choose

__all__ = [
    "Context",
    "ExternalityFee",
    "FlatPrice",
    "LoadBasedPrice",
    "NoFee",
    "Price",
    "Pricing",
    "Refused",
    "Window",
    "choose",
]
