package console

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// pageSize is how many rows a list page asks for.
const pageSize = 50

// countsMaxStaleness is how old the queue counts of the overview and the
// queues page may be (ListQueuesRequest.max_staleness): the coordinator
// answers from its last count and counts again in the background, so a
// page never waits for a count of every job while a recent one exists.
const countsMaxStaleness = 30 * time.Second

// overviewData is the overview's live part.
type overviewData struct {
	Queues []*leaseholdv1.QueueStats
	// CountedAt is when the queue counts were taken.
	CountedAt *timestamppb.Timestamp
	Breakers  []*leaseholdv1.Breaker
	Workers   []*leaseholdv1.WorkerInfo
}

func (c *console) overviewData(req *request) (overviewData, error) {
	var d overviewData
	if req.can.QueuesRead {
		qs, err := c.api.admin.ListQueues(req.ctx, &leaseholdv1.ListQueuesRequest{MaxStaleness: durationpb.New(countsMaxStaleness)})
		if err != nil {
			return d, err
		}
		for _, q := range qs.GetQueues() {
			d.Queues = append(d.Queues, q.GetStats())
			d.CountedAt = q.GetStats().GetCountedAt()
		}
	}
	if req.can.BreakersRead {
		bs, err := c.api.admin.ListBreakers(req.ctx, &leaseholdv1.ListBreakersRequest{})
		if err != nil {
			return d, err
		}
		d.Breakers = bs.GetBreakers()
	}
	if req.can.WorkersRead {
		ws, err := c.api.admin.ListWorkers(req.ctx, &leaseholdv1.ListWorkersRequest{})
		if err != nil {
			return d, err
		}
		d.Workers = ws.GetWorkers()
	}
	return d, nil
}

func (c *console) overview(req *request) error {
	d, err := c.overviewData(req)
	if err != nil {
		return err
	}
	c.render(req, http.StatusOK, "overview.html", "Overview", "overview", d)
	return nil
}

// overviewLive is the overview's live part alone, which the page polls.
func (c *console) overviewLive(req *request) error {
	d, err := c.overviewData(req)
	if err != nil {
		return err
	}
	c.renderTemplate(req.w, http.StatusOK, "overview.html", "live", view{P: c.cfg.Prefix, Can: req.can, Data: d})
	return nil
}

// jobsData is the jobs page's filter and rows.
type jobsData struct {
	Queue, Kind, State string
	// Filter is the filter string (docs/filters.md) passed to ListJobs as
	// it is; FilterError is the coordinator's answer when it refused it.
	Filter      string
	FilterError string
	States      []string
	Jobs        []*leaseholdv1.Job
	Next        string
}

func (c *console) jobs(req *request) error {
	q := req.r.URL.Query()
	d := jobsData{Queue: q.Get("queue"), Kind: q.Get("kind"), State: q.Get("state"), Filter: q.Get("filter"), States: jobStateNames()}
	in := &leaseholdv1.ListJobsRequest{
		Queue: d.Queue, Kind: d.Kind, PageSize: pageSize, PageToken: q.Get("page"),
		View: leaseholdv1.JobView_JOB_VIEW_BASIC, Filter: d.Filter,
	}
	if st, ok := jobStateFromName(d.State); ok {
		in.States = []leaseholdv1.JobState{st}
	}
	out, err := c.api.jobs.ListJobs(req.ctx, in)
	if status.Code(err) == codes.InvalidArgument {
		// A filter (or field) the coordinator refused: the page stays, with
		// the form as typed and the reason beside it, so it can be fixed.
		d.FilterError = errorText(err)
		c.render(req, http.StatusBadRequest, "jobs.html", "Jobs", "jobs", d)
		return nil
	}
	if err != nil {
		return err
	}
	d.Jobs, d.Next = out.GetJobs(), out.GetNextPageToken()
	c.render(req, http.StatusOK, "jobs.html", "Jobs", "jobs", d)
	return nil
}

// jobData is one job's page.
type jobData struct {
	Job         *leaseholdv1.Job
	Events      []*leaseholdv1.Event
	More        bool
	Effects     *leaseholdv1.ListJobEffectsResponse
	Checkpoints []*leaseholdv1.Checkpoint
	Dead        *leaseholdv1.DeadJob
	Payload     shown
	Result      shown
	State       shown
}

// jobEventsMax is how many events the job page shows.
const jobEventsMax = 500

func (c *console) job(req *request) error {
	id := req.r.PathValue("id")
	got, err := c.api.jobs.GetJob(req.ctx, &leaseholdv1.GetJobRequest{JobId: id})
	if err != nil {
		return err
	}
	j := got.GetJob()
	ev, err := c.api.jobs.ListJobEvents(req.ctx, &leaseholdv1.ListJobEventsRequest{JobId: id, PageSize: jobEventsMax})
	if err != nil {
		return err
	}
	effs, err := c.api.jobs.ListJobEffects(req.ctx, &leaseholdv1.ListJobEffectsRequest{JobId: id})
	if err != nil {
		return err
	}
	cps, err := c.api.jobs.ListJobCheckpoints(req.ctx, &leaseholdv1.ListJobCheckpointsRequest{JobId: id})
	if err != nil {
		return err
	}
	d := jobData{
		Job: j, Events: ev.GetEvents(), More: ev.GetHasMore(), Effects: effs, Checkpoints: cps.GetCheckpoints(),
		Payload: show(j.GetPayload()), Result: show(j.GetResult()),
	}
	if j.GetCheckpoint() != nil {
		d.State = show(j.GetCheckpoint().GetState())
	}
	if j.GetState() == leaseholdv1.JobState_JOB_STATE_DEAD && req.can.DeadRead {
		dj, err := c.api.admin.GetDeadJob(req.ctx, &leaseholdv1.GetDeadJobRequest{JobId: id})
		if err != nil {
			return err
		}
		d.Dead = dj.GetDeadJob()
	}
	c.render(req, http.StatusOK, "job.html", "Job "+id, "jobs", d)
	return nil
}

// deadData is the dead-letter page.
type deadData struct {
	Queue string
	// Filter and FilterError as in jobsData.
	Filter      string
	FilterError string
	Abandoned   bool
	Jobs        []*leaseholdv1.DeadJob
	Next        string
}

func (c *console) dead(req *request) error {
	q := req.r.URL.Query()
	d := deadData{Queue: q.Get("queue"), Filter: q.Get("filter"), Abandoned: q.Get("abandoned") == "1"}
	out, err := c.api.admin.ListDeadJobs(req.ctx, &leaseholdv1.ListDeadJobsRequest{
		Queue: d.Queue, PageSize: pageSize, PageToken: q.Get("page"), IncludeAbandoned: d.Abandoned,
		View: leaseholdv1.JobView_JOB_VIEW_BASIC, Filter: d.Filter,
	})
	if status.Code(err) == codes.InvalidArgument {
		d.FilterError = errorText(err)
		c.render(req, http.StatusBadRequest, "dead.html", "Dead letters", "dead", d)
		return nil
	}
	if err != nil {
		return err
	}
	d.Jobs, d.Next = out.GetDeadJobs(), out.GetNextPageToken()
	c.render(req, http.StatusOK, "dead.html", "Dead letters", "dead", d)
	return nil
}

func (c *console) queues(req *request) error {
	out, err := c.api.admin.ListQueues(req.ctx, &leaseholdv1.ListQueuesRequest{MaxStaleness: durationpb.New(countsMaxStaleness)})
	if err != nil {
		return err
	}
	c.render(req, http.StatusOK, "queues.html", "Queues", "queues", out.GetQueues())
	return nil
}

func (c *console) breakers(req *request) error {
	out, err := c.api.admin.ListBreakers(req.ctx, &leaseholdv1.ListBreakersRequest{})
	if err != nil {
		return err
	}
	c.render(req, http.StatusOK, "breakers.html", "Breakers", "breakers", out.GetBreakers())
	return nil
}

// workersData is the workers page: this coordinator's workers, and the
// leases held across the fleet (from the jobs, so every replica's).
type workersData struct {
	Workers []*leaseholdv1.WorkerInfo
	Leased  []*leaseholdv1.Job
	More    bool
}

// heldLeasesMax is how many leased jobs the workers page lists.
const heldLeasesMax = 200

// breakerHistoryData is one breaker with a page of its transitions.
type breakerHistoryData struct {
	Breaker *leaseholdv1.Breaker
	Events  []*leaseholdv1.BreakerEvent
	Next    int64
}

// breakerEventsPage is how many transitions the history page shows.
const breakerEventsPage = 100

func (c *console) breakerHistory(req *request) error {
	q := req.r.URL.Query()
	dep := q.Get("dependency")
	after, err := strconv.ParseInt(cmp.Or(q.Get("after"), "0"), 10, 64)
	if err != nil {
		return invalid("after", "must be a sequence number")
	}
	b, err := c.api.admin.GetBreaker(req.ctx, &leaseholdv1.GetBreakerRequest{Dependency: dep})
	if err != nil {
		return err
	}
	ev, err := c.api.admin.ListBreakerEvents(req.ctx, &leaseholdv1.ListBreakerEventsRequest{
		Dependency: dep, AfterSequence: after, PageSize: breakerEventsPage,
	})
	if err != nil {
		return err
	}
	d := breakerHistoryData{Breaker: b.GetBreaker(), Events: ev.GetEvents()}
	if n := len(d.Events); n == breakerEventsPage {
		d.Next = d.Events[n-1].GetSequence()
	}
	c.render(req, http.StatusOK, "breaker.html", "Breaker "+dep, "breakers", d)
	return nil
}

func (c *console) workersPage(req *request) error {
	out, err := c.api.admin.ListWorkers(req.ctx, &leaseholdv1.ListWorkersRequest{})
	if err != nil {
		return err
	}
	d := workersData{Workers: out.GetWorkers()}
	if req.can.JobsRead {
		leased, err := c.api.jobs.ListJobs(req.ctx, &leaseholdv1.ListJobsRequest{
			States: []leaseholdv1.JobState{leaseholdv1.JobState_JOB_STATE_LEASED}, PageSize: heldLeasesMax,
			View: leaseholdv1.JobView_JOB_VIEW_BASIC,
		})
		if err != nil {
			return err
		}
		d.Leased = leased.GetJobs()
		slices.SortStableFunc(d.Leased, func(a, b *leaseholdv1.Job) int {
			return strings.Compare(a.GetLease().GetOwner(), b.GetLease().GetOwner())
		})
		d.More = leased.GetNextPageToken() != ""
	}
	c.render(req, http.StatusOK, "workers.html", "Workers", "workers", d)
	return nil
}

// schedulesData is the schedules page.
type schedulesData struct {
	Queue     string
	Schedules []*leaseholdv1.Schedule
	Next      string
}

func (c *console) schedulesPage(req *request) error {
	q := req.r.URL.Query()
	d := schedulesData{Queue: q.Get("queue")}
	out, err := c.api.schedules.ListSchedules(req.ctx, &leaseholdv1.ListSchedulesRequest{
		Queue: d.Queue, PageSize: pageSize, PageToken: q.Get("page"),
	})
	if err != nil {
		return err
	}
	d.Schedules, d.Next = out.GetSchedules(), out.GetNextPageToken()
	c.render(req, http.StatusOK, "schedules.html", "Schedules", "schedules", d)
	return nil
}

// keysData is the keys page; Created is set once, on the answer to a
// create, and never again: the secret is not stored anywhere the console
// can read it back.
type keysData struct {
	Keys    []*leaseholdv1.Principal
	Roles   []string
	Revoked bool
	Created *leaseholdv1.CreateApiKeyResponse
}

func (c *console) keys(req *request) error {
	return c.showKeys(req, nil)
}

func (c *console) showKeys(req *request, created *leaseholdv1.CreateApiKeyResponse) error {
	revoked := req.r.URL.Query().Get("revoked") == "1"
	out, err := c.api.admin.ListApiKeys(req.ctx, &leaseholdv1.ListApiKeysRequest{IncludeRevoked: revoked})
	if err != nil {
		return err
	}
	d := keysData{Keys: out.GetPrincipals(), Roles: roleNames(), Revoked: revoked, Created: created}
	c.render(req, http.StatusOK, "keys.html", "API keys", "keys", d)
	return nil
}

// auditData is the audit page.
type auditData struct {
	Events []*leaseholdv1.AuditEvent
	Next   string
}

func (c *console) audit(req *request) error {
	out, err := c.api.admin.ListAuditEvents(req.ctx, &leaseholdv1.ListAuditEventsRequest{
		PageSize: pageSize, PageToken: req.r.URL.Query().Get("page"),
	})
	if err != nil {
		return err
	}
	c.render(req, http.StatusOK, "audit.html", "Audit log", "audit", auditData{Events: out.GetEvents(), Next: out.GetNextPageToken()})
	return nil
}

// splitList splits a comma- or space-separated form field.
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' })
}
