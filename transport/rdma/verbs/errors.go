package verbs

import "errors"

// ErrAsyncEvent is wrapped by the error of a connection or CQ that the
// device failed with an asynchronous event (IBV_EVENT_QP_FATAL,
// IBV_EVENT_CQ_ERR, IBV_EVENT_PORT_ERR, IBV_EVENT_DEVICE_FATAL, ...); the
// message names the event.
var ErrAsyncEvent = errors.New("the RDMA device reported a fatal asynchronous event")
