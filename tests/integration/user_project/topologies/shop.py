from bolts.orderspaid import OrdersPaid
from bolts.shopsink import ShopSink
from spouts.shop import Orders, Payments
from streamparse import Grouping

from elastorm import ElasticTopology, keyed


class Shop(ElasticTopology):
    config = {
        "elastorm.key_groups": 12,
        "elastorm.checkpoint_interval_secs": 1,
        "elastorm.allowed_lateness_secs": 5,
        "elastorm.join_operators": ["orders_paid"],
    }
    orders = Orders.spec()
    payments = Payments.spec()
    orders_paid = OrdersPaid.spec(
        inputs={orders: keyed("customer"), payments: keyed("customer")}, par=2
    )
    sink = ShopSink.spec(inputs={orders_paid: Grouping.SHUFFLE})
